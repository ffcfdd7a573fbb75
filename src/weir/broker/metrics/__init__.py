"""The broker's Prometheus metrics (`metrics.port`): counters kept on the event loop as requests
pass (`stats`), a snapshot of them and of the partitions taken on the loop at each scrape
(`snapshot`), and the families served from prometheus-client's own thread (`families`,
`endpoint`). Names follow the Prometheus JMX exporter's rendering of Kafka's MBeans; the list
is in `families`."""
