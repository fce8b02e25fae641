"""The admin client and its value types, at confluent-kafka's module path
(``confluent_kafka.admin`` -> ``kafka_client.admin``).

    from kafka_client.admin import AdminClient, NewTopic, ConfigResource

See docs/admin.md for every operation, its result and where its request goes.
"""
from kafka_client._cluster.metadata import (
    BrokerMetadata,
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
)
from kafka_client.admin._acl import AclBinding, AclBindingFilter, AclOperation, AclPermissionType
from kafka_client.admin._client import AdminClient
from kafka_client.admin._config import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)
from kafka_client.admin._groups import (
    ConsumerGroupDescription,
    ConsumerGroupListing,
    GroupMember,
    GroupMetadata,
    ListConsumerGroupsResult,
    MemberAssignment,
    MemberDescription,
    ShareGroupDescription,
    ShareMemberDescription,
)
from kafka_client.admin._resource import ResourcePatternType, ResourceType
from kafka_client.admin._scram import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialDeletion,
    UserScramCredentialsDescription,
    UserScramCredentialUpsertion,
)
from kafka_client.admin._topics import (
    DeletedRecords,
    DescribeClusterResult,
    ListOffsetsResultInfo,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    TopicDescription,
)
from kafka_client.errors import KafkaError, KafkaException
from kafka_client.types import OFFSET_INVALID

# confluent-kafka's module-level constants: the enums' numbers.
CONFIG_SOURCE_UNKNOWN_CONFIG = ConfigSource.UNKNOWN_CONFIG.value
CONFIG_SOURCE_DYNAMIC_TOPIC_CONFIG = ConfigSource.DYNAMIC_TOPIC_CONFIG.value
CONFIG_SOURCE_DYNAMIC_BROKER_CONFIG = ConfigSource.DYNAMIC_BROKER_CONFIG.value
CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
CONFIG_SOURCE_STATIC_BROKER_CONFIG = ConfigSource.STATIC_BROKER_CONFIG.value
CONFIG_SOURCE_DEFAULT_CONFIG = ConfigSource.DEFAULT_CONFIG.value
CONFIG_SOURCE_GROUP_CONFIG = ConfigSource.GROUP_CONFIG.value
RESOURCE_UNKNOWN = ResourceType.UNKNOWN.value
RESOURCE_ANY = ResourceType.ANY.value
RESOURCE_TOPIC = ResourceType.TOPIC.value
RESOURCE_GROUP = ResourceType.GROUP.value
RESOURCE_BROKER = ResourceType.BROKER.value
RESOURCE_TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID.value

__all__ = [
    "AdminClient",
    "NewTopic",
    "NewPartitions",
    "ConfigResource",
    "ConfigEntry",
    "ConfigSource",
    "AlterConfigOpType",
    "ResourceType",
    "ResourcePatternType",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "OffsetSpec",
    "ListOffsetsResultInfo",
    "DeletedRecords",
    "TopicDescription",
    "DescribeClusterResult",
    "ConsumerGroupListing",
    "ListConsumerGroupsResult",
    "ConsumerGroupDescription",
    "MemberDescription",
    "MemberAssignment",
    "GroupMetadata",
    "GroupMember",
    "ShareGroupDescription",
    "ShareMemberDescription",
    "ScramMechanism",
    "ScramCredentialInfo",
    "UserScramCredentialsDescription",
    "UserScramCredentialAlteration",
    "UserScramCredentialUpsertion",
    "UserScramCredentialDeletion",
    "ClusterMetadata",
    "BrokerMetadata",
    "TopicMetadata",
    "PartitionMetadata",
    "KafkaError",
    "KafkaException",
    "OFFSET_INVALID",
    "CONFIG_SOURCE_UNKNOWN_CONFIG",
    "CONFIG_SOURCE_DYNAMIC_TOPIC_CONFIG",
    "CONFIG_SOURCE_DYNAMIC_BROKER_CONFIG",
    "CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG",
    "CONFIG_SOURCE_STATIC_BROKER_CONFIG",
    "CONFIG_SOURCE_DEFAULT_CONFIG",
    "CONFIG_SOURCE_GROUP_CONFIG",
    "RESOURCE_UNKNOWN",
    "RESOURCE_ANY",
    "RESOURCE_TOPIC",
    "RESOURCE_GROUP",
    "RESOURCE_BROKER",
    "RESOURCE_TRANSACTIONAL_ID",
]
