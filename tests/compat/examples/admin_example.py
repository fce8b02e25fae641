#!/usr/bin/env python
"""Administers a cluster the way confluent-kafka's published admin example does: one
operation per run, given on the command line, each waiting on the futures the
AdminClient returns and printing one line per result (written here in its documented
shape, for the drop-in tests).

    admin_example.py BOOTSTRAP create_topics TOPIC...
    admin_example.py BOOTSTRAP delete_topics TOPIC...
    admin_example.py BOOTSTRAP describe_configs RESOURCE_TYPE NAME
    admin_example.py BOOTSTRAP list [all|topics|brokers]
    admin_example.py BOOTSTRAP list_consumer_groups
"""
import sys

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic


def example_create_topics(a, topics):
    """Create topics (3 partitions, replication factor 1)."""
    new_topics = [NewTopic(topic, num_partitions=3, replication_factor=1) for topic in topics]
    # Call create_topics to asynchronously create topics; a dict of <topic,future> is
    # returned.
    fs = a.create_topics(new_topics)
    # Wait for each operation to finish.
    for topic, f in fs.items():
        try:
            f.result()  # The result itself is None
            print("Topic {} created".format(topic))
        except Exception as e:
            print("Failed to create topic {}: {}".format(topic, e))


def example_delete_topics(a, topics):
    """Delete topics."""
    fs = a.delete_topics(topics, operation_timeout=30)
    for topic, f in fs.items():
        try:
            f.result()
            print("Topic {} deleted".format(topic))
        except Exception as e:
            print("Failed to delete topic {}: {}".format(topic, e))


def print_config(config, depth):
    print("%40s = %-50s  [%s,is:read-only=%r,default=%r,sensitive=%r,synonym=%r,synonyms=%s]" %
          ((" " * depth) + config.name, config.value, config.source, config.is_read_only,
           config.is_default, config.is_sensitive, config.is_synonym,
           ["%s:%s" % (x.name, x.source) for x in iter(config.synonyms.values())]))


def example_describe_configs(a, args):
    """Describe the configuration of a resource (a topic, a broker, ...)."""
    resources = [ConfigResource(restype, resname) for restype, resname in
                 zip(args[0::2], args[1::2])]
    fs = a.describe_configs(resources)
    for res, f in fs.items():
        try:
            configs = f.result()
            for config in iter(configs.values()):
                print_config(config, 1)
        except KafkaException as e:
            print("Failed to describe {}: {}".format(res, e))
        except Exception:
            raise


def example_list(a, args):
    """List brokers and topics."""
    what = args[0] if len(args) > 0 else "all"
    md = a.list_topics(timeout=10)
    print("Cluster {} metadata (response from broker {}):".format(md.cluster_id,
                                                                  md.orig_broker_name))
    if what in ("all", "brokers"):
        print(" {} brokers:".format(len(md.brokers)))
        for b in iter(md.brokers.values()):
            if b.id == md.controller_id:
                print("  {}  (controller)".format(b))
            else:
                print("  {}".format(b))
    if what not in ("all", "topics"):
        return
    print(" {} topics:".format(len(md.topics)))
    for t in iter(md.topics.values()):
        if t.error is not None:
            errstr = ": {}".format(t.error)
        else:
            errstr = ""
        print("  \"{}\" with {} partition(s){}".format(t, len(t.partitions), errstr))
        for p in iter(t.partitions.values()):
            if p.error is not None:
                errstr = ": {}".format(p.error)
            else:
                errstr = ""
            print("partition {} leader: {}, replicas: {}, isrs: {} errstr: {}".format(
                p.id, p.leader, p.replicas, p.isrs, errstr))


def example_list_consumer_groups(a, args):
    """List consumer groups."""
    future = a.list_consumer_groups(request_timeout=10)
    try:
        groups = future.result()
        print("{} consumer groups".format(len(groups.valid)))
        for valid in groups.valid:
            print("    id: {} is_simple: {} state: {}".format(
                valid.group_id, valid.is_simple_consumer_group, valid.state))
        print("{} errors".format(len(groups.errors)))
        for error in groups.errors:
            print("    error: {}".format(error))
    except Exception:
        raise


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.stderr.write("Usage: %s <bootstrap-brokers> <operation> <args..>\n\n" % sys.argv[0])
        sys.stderr.write("operations:\n create_topics <topic1> <topic2> ..\n"
                         " delete_topics <topic1> <topic2> ..\n"
                         " describe_configs <resource_type1> <resource_name1> ..\n"
                         " list [<all|topics|brokers>]\n list_consumer_groups\n")
        sys.exit(1)

    broker = sys.argv[1]
    operation = sys.argv[2]
    args = sys.argv[3:]

    # Create Admin client
    a = AdminClient({"bootstrap.servers": broker})

    opsmap = {"create_topics": example_create_topics,
              "delete_topics": example_delete_topics,
              "describe_configs": example_describe_configs,
              "list": example_list,
              "list_consumer_groups": example_list_consumer_groups}

    if operation not in opsmap:
        sys.stderr.write("Unknown operation: %s\n" % operation)
        sys.exit(1)

    opsmap[operation](a, args)
