"""kafka_client: a Kafka client on top of kafka_proto (work in progress)."""
