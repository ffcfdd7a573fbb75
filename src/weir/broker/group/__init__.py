"""Consumer groups: the coordinator, its state machine, and their durable state in
`__consumer_offsets`."""
