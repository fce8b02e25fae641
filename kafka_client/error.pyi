# kafka_client.error is kafka_client.errors under confluent-kafka's module name: at run
# time an alias in sys.modules (kafka_client/__init__.py), which a type checker cannot see.
# This stub gives checkers the same names.
from kafka_client.errors import *
