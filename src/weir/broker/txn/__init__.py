"""The transaction coordinator: Kafka's transactional ids, their state in `__transaction_state`,
and the two-phase commit that ends each transaction with markers on its partitions."""
