"""A multi-broker Kafka cluster for tests: brokers in one background process, each on
its own loopback port, storing partitions in Kafka's segment format and serving Fetch
with ``os.sendfile``, with fault injection.

    from kafka_client.testing import Cluster

    with Cluster(brokers=3) as cluster:
        cluster.create_topic("orders", partitions=3, replication_factor=3)
        ...  # clients use cluster.bootstrap_servers
        cluster.move_leader("orders", 0)
        cluster.inject_errors("Produce", ["NOT_LEADER_OR_FOLLOWER"], broker=1)
        cluster.stop_broker(2); cluster.start_broker(2)

``python -m kafka_client.testing`` runs one in the foreground. See docs/testing.md.
"""
from .cluster import (
    COORDINATOR_GROUP,
    COORDINATOR_TRANSACTION,
    BrokerAddress,
    Cluster,
    ClusterError,
    PartitionState,
    ReplicaLogState,
    RequestLogEntry,
    TopicState,
)

__all__ = [
    "Cluster",
    "ClusterError",
    "BrokerAddress",
    "PartitionState",
    "ReplicaLogState",
    "RequestLogEntry",
    "TopicState",
    "COORDINATOR_GROUP",
    "COORDINATOR_TRANSACTION",
]
