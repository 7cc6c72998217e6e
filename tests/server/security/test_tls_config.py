"""TLS settings refused at start-up with a ConfigError naming the key; per-listener overrides; contexts."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from tests.support.certs import TlsMaterial

from tidelog.server.config import BrokerConfig, ConfigError, parse_broker_config
from tidelog.server.security.tls_config import check_tls, inter_broker_tls, listener_tls, tls_settings


def refusal(props: dict[str, str]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        check_tls(
            BrokerConfig.from_mapping({"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", **props})
        )
    return caught.value


def test_an_ssl_listener_without_a_keystore_is_refused() -> None:
    error = refusal({})
    assert error.key == "ssl.keystore.location"
    assert "listener SSL uses TLS but has no keystore" in str(error)


@pytest.mark.parametrize("store", ["JKS", "PKCS12"])
def test_a_jks_or_pkcs12_store_is_refused_saying_pem_is_read(pki: TlsMaterial, store: str) -> None:
    error = refusal({"ssl.keystore.location": str(pki.broker.keystore), "ssl.keystore.type": store})
    assert error.key == "ssl.keystore.type"
    assert "tidelog reads PEM keystores and truststores only" in str(error)
    error = refusal(
        {
            "ssl.keystore.location": str(pki.broker.keystore),
            "ssl.client.auth": "required",
            "ssl.truststore.location": str(pki.ca.cert),
            "ssl.truststore.type": store,
        }
    )
    assert error.key == "ssl.truststore.type"


def test_unreadable_files_are_refused_naming_the_key(pki: TlsMaterial, tmp_path: Path) -> None:
    error = refusal({"ssl.keystore.location": str(tmp_path / "missing.pem")})
    assert error.key == "ssl.keystore.location"
    assert "cannot be read: No such file or directory" in str(error)
    error = refusal(
        {
            "ssl.keystore.location": str(pki.broker.keystore),
            "ssl.client.auth": "requested",
            "ssl.truststore.location": str(tmp_path / "none.pem"),
        }
    )
    assert error.key == "ssl.truststore.location"
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a pem file\n")
    error = refusal({"ssl.keystore.location": str(garbage)})
    assert error.key == "ssl.keystore.location"
    assert "no PEM private key and certificate chain could be read" in str(error)


def test_a_key_that_does_not_match_the_certificate_is_refused(pki: TlsMaterial, tmp_path: Path) -> None:
    mixed = tmp_path / "mixed.pem"
    mixed.write_bytes(pki.alice.key.read_bytes() + pki.broker.cert.read_bytes())
    error = refusal({"ssl.keystore.location": str(mixed)})
    assert error.key == "ssl.keystore.location"
    assert "the private key does not match the certificate" in str(error)


def test_an_encrypted_key_needs_its_password(pki: TlsMaterial) -> None:
    error = refusal({"ssl.keystore.location": str(pki.bob.keystore), "ssl.key.password": "wrong"})
    assert error.key == "ssl.keystore.location"
    assert "does not decrypt with ssl.key.password" in str(error)
    error = refusal({"ssl.keystore.location": str(pki.bob.keystore)})
    assert "the private key is encrypted: set ssl.key.password" in str(error)
    check_tls(
        BrokerConfig.from_mapping(
            {
                "listeners": "SSL://127.0.0.1:0",
                "ssl.keystore.location": str(pki.bob.keystore),
                "ssl.key.password": "bob-secret",
            }
        )
    )


def test_per_listener_overrides_win_and_errors_name_the_prefixed_key(pki: TlsMaterial) -> None:
    props = {
        "listeners": "SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
        "listener.security.protocol.map": "SSL:SSL,MTLS:SSL",
        "ssl.keystore.location": str(pki.broker.keystore),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.truststore.location": str(pki.ca.cert),
        "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/",
    }
    tls = listener_tls(BrokerConfig.from_mapping(props))
    assert tls["SSL"].context.verify_mode == ssl.CERT_NONE
    assert tls["MTLS"].context.verify_mode == ssl.CERT_REQUIRED
    assert tls["MTLS"].principal_mapper.name("CN=alice,OU=eng,O=acme") == "alice"
    assert tls["SSL"].principal_mapper.name("CN=alice,OU=eng,O=acme") == "CN=alice,OU=eng,O=acme"
    with pytest.raises(ConfigError) as caught:
        listener_tls(
            BrokerConfig.from_mapping({**props, "listener.name.mtls.ssl.truststore.location": "/nonexistent"})
        )
    assert caught.value.key == "listener.name.mtls.ssl.truststore.location"
    with pytest.raises(ConfigError) as caught:
        BrokerConfig.from_mapping({**props, "listener.name.mtls.ssl.client.auth": "sometimes"})
    assert caught.value.key == "listener.name.mtls.ssl.client.auth"
    with pytest.raises(ConfigError) as caught:
        listener_tls(
            BrokerConfig.from_mapping({**props, "listener.name.mtls.ssl.principal.mapping.rules": "BAD"})
        )
    assert caught.value.key == "listener.name.mtls.ssl.principal.mapping.rules"


def test_an_override_is_not_an_unknown_key() -> None:
    _config, warnings = parse_broker_config(
        {"listener.name.ssl.ssl.client.auth": "required", "listener.name.x.unknown.key": "1"}
    )
    assert warnings == ["unknown configuration 'listener.name.x.unknown.key' (properties) is ignored"]


def test_inline_pem_keystore_and_truststore(pki: TlsMaterial) -> None:
    key = pki.alice.key.read_text()
    chain = pki.alice.cert.read_text()
    tls = listener_tls(
        BrokerConfig.from_mapping(
            {
                "listeners": "SSL://127.0.0.1:0",
                "ssl.keystore.key": key,
                "ssl.keystore.certificate.chain": chain,
                "ssl.client.auth": "required",
                "ssl.truststore.certificates": pki.ca.cert.read_text(),
            }
        )
    )
    assert tls["SSL"].context.verify_mode == ssl.CERT_REQUIRED
    error = refusal({"ssl.keystore.key": key})
    assert error.key == "ssl.keystore.certificate.chain"


def test_protocol_versions_and_cipher_suites(pki: TlsMaterial) -> None:
    base = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(pki.broker.keystore)}
    context = listener_tls(BrokerConfig.from_mapping(base))["SSL"].context
    assert (context.minimum_version, context.maximum_version) == (
        ssl.TLSVersion.TLSv1_2,
        ssl.TLSVersion.TLSv1_3,
    )
    context = listener_tls(BrokerConfig.from_mapping({**base, "ssl.protocol": "TLSv1.2"}))["SSL"].context
    assert context.maximum_version == ssl.TLSVersion.TLSv1_2
    context = listener_tls(BrokerConfig.from_mapping({**base, "ssl.enabled.protocols": "TLSv1.3"}))[
        "SSL"
    ].context
    assert context.minimum_version == ssl.TLSVersion.TLSv1_3
    with pytest.raises(ConfigError) as caught:
        listener_tls(
            BrokerConfig.from_mapping({**base, "ssl.enabled.protocols": "TLSv1.3", "ssl.protocol": "TLSv1.2"})
        )
    assert caught.value.key == "ssl.enabled.protocols"
    with pytest.raises(ConfigError) as caught:
        BrokerConfig.from_mapping({**base, "ssl.enabled.protocols": "TLSv1.1"})
    assert caught.value.key == "ssl.enabled.protocols"
    listener_tls(
        BrokerConfig.from_mapping(
            {**base, "ssl.cipher.suites": "ECDHE-ECDSA-AES128-GCM-SHA256,TLS_AES_128_GCM_SHA256"}
        )
    )
    with pytest.raises(ConfigError) as caught:
        listener_tls(BrokerConfig.from_mapping({**base, "ssl.cipher.suites": "NO-SUCH-CIPHER"}))
    assert caught.value.key == "ssl.cipher.suites"


def test_the_inter_broker_client_context_verifies_the_peer(pki: TlsMaterial) -> None:
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SSL",
        "inter.broker.listener.name": "INTERNAL",
        "ssl.keystore.location": str(pki.broker.keystore),
        "ssl.truststore.location": str(pki.ca.cert),
    }
    broker_config = BrokerConfig.from_mapping(props)
    context = inter_broker_tls(broker_config, "INTERNAL")
    assert context is not None
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert inter_broker_tls(broker_config, "PLAINTEXT") is None
    relaxed = inter_broker_tls(
        BrokerConfig.from_mapping({**props, "ssl.endpoint.identification.algorithm": ""}), "INTERNAL"
    )
    assert relaxed is not None
    assert not relaxed.check_hostname
    assert tls_settings(broker_config, "internal").listener_name == "INTERNAL"
