"""Cluster view shared by the producer, consumer and admin client: connections by broker
and the metadata cache (see :mod:`kafka_client._cluster.metadata`)."""
from kafka_client._cluster.cluster import Cluster  # noqa: F401
from kafka_client._cluster.metadata import (  # noqa: F401
    BrokerMetadata,
    ClusterMetadata,
    MetadataCache,
    PartitionMetadata,
    TopicInfo,
    TopicMetadata,
)
