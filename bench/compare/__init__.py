"""Side-by-side benchmark of weir against RabbitMQ, NATS JetStream and Redis Streams.

`bench/compare.py` is the entry point. This package holds its parts: `servers` starts and stops
the brokers as child processes, `clients` drives each broker through its own PyPI client with the
same workloads, `physical` measures the machine's limits, `stats` and `report` turn timings into
figures, ratios and a Markdown table, and `charts` draws them. Only `servers` and `physical`
touch processes, sockets or files outside the results directory.
"""
