"""Kafka's names for a client library's error codes."""

from weir.protocol.errors import client_error_name


def test_kafka_codes_get_kafkas_names_and_local_errors_keep_the_librarys() -> None:
    assert client_error_name(3, "UNKNOWN_TOPIC_OR_PART") == "UNKNOWN_TOPIC_OR_PARTITION"
    assert client_error_name(31, "x") == "CLUSTER_AUTHORIZATION_FAILED"
    assert client_error_name(-169, "_AUTHENTICATION") == "_AUTHENTICATION"
    assert client_error_name(32_000, "SOMETHING_NEW") == "SOMETHING_NEW"
