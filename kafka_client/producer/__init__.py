"""The producer: API, accumulator, partitioners, sender, idempotence."""
