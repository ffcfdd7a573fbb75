"""The Kafka protocol, sans-IO: frames, the request/response codec (kio), the advertised API
versions, and error codes. Tested with bytes alone; never imports sockets or an event loop."""
