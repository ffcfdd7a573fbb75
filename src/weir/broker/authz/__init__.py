"""Authorization with Kafka's ACL semantics: the ACL model, the pure decision, ACL storage,
the broker's authorizer, and the table of what each API needs it to allow."""
