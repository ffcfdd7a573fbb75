"""The web console (`weir console`): a small HTTP server that shows a cluster to an operator.

Pages are rendered on the server as HTML with a small stylesheet; charts are SVG drawn on the
server from samples the console keeps in memory; a few lines of vanilla JavaScript reload a page
on a timer. Nothing is fetched from anywhere but the console itself.

It reads the cluster only through the Kafka protocol, as any client would (confluent-kafka for
what librdkafka can ask, `weir.cli.broker_socket` for DescribeLogDirs), with the client settings
every weir command takes, TLS and SASL included. It changes nothing in the cluster: no topic is
created, no offset committed.

The modules, from the bottom: `errors` (what a page can fail with), `reader` (the cluster's
answers as plain data), `history` and `sampler` (samples over time), `browse` (the message
browser), `audit` (who reads and writes what, from `__audit`), `charts` and `html` (markup),
the `*_pages` modules (one renderer per page, pure), `routes` (what each URL reads and shows)
and `server` (HTTP).
"""
