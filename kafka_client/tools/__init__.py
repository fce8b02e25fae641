"""Command-line tools: ``python -m kafka_client.tools <command>``.

* ``dump-log FILE [--records]``: the batches (and with ``--records`` the records) of a
  Kafka segment file (``.log``), or the entries of an ``.index`` / ``.timeindex`` file,
  decoded through ``kafka_proto`` (like Kafka's ``kafka-dump-log.sh``).
"""
