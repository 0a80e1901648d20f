"""Usage events: the relay that delivers the outbox (hearth.observability.usage_outbox) to configured sinks."""
