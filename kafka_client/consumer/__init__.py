"""The consumer: :class:`~kafka_client.consumer.consumer.Consumer` (API), the fetcher
(I/O thread), group membership and the partition assignors."""
