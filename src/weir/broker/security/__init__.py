"""Kafka's security model for the broker's connections: listeners and their security
protocols, TLS, SASL (PLAIN, SCRAM-SHA-256/512), SCRAM credentials, and the session (listener
and principal) of each connection. Authorization is not decided here."""
