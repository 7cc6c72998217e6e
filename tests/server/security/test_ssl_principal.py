"""Kafka's ``ssl.principal.mapping.rules`` (SslPrincipalMapper, with the cases of Kafka's own
SslPrincipalMapperTest) and the subject DN as Java prints it."""

from __future__ import annotations

import pytest

from tidelog.server.security.ssl_principal import NoMatchingRuleError, SslPrincipalMapper, subject_dn

KAFKA_RULES = (
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,"
    "DEFAULT"
)


@pytest.mark.parametrize(
    ("rules", "dn", "name"),
    [
        ("DEFAULT", "CN=alice,OU=eng,O=acme", "CN=alice,OU=eng,O=acme"),
        (None, "CN=alice,OU=eng,O=acme", "CN=alice,OU=eng,O=acme"),
        (KAFKA_RULES, "CN=kafka1,OU=ServiceUsers,O=Org,C=US", "kafka1"),
        (KAFKA_RULES, "CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US", "duke@javasoft"),
        (KAFKA_RULES, "OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
        (KAFKA_RULES, "OU=x,CN=client.example,O=y", "CLIENT.EXAMPLE"),
        # a $n beyond the pattern's groups is literal text (Kafka's escapeLiteralBackReferences)
        ("RULE:^CN=(.*?),.*$/$1@$2/", "CN=alice,OU=eng", "alice@$2"),
        ("RULE:^CN=(.*?),.*$/\\$1-$1/", "CN=alice,OU=eng", "$1-alice"),
        ("RULE:^CN=([^,]*),O=acme$/acme-$1/, DEFAULT", "CN=bob,O=acme", "acme-bob"),
        ("RULE:^CN=([^,]*),O=acme$/acme-$1/, DEFAULT", "CN=bob,O=other", "CN=bob,O=other"),
        # the pattern must match the whole DN
        ("RULE:CN=([^,]*)/$1/,DEFAULT", "CN=bob,O=acme", "CN=bob,O=acme"),
        ("  RULE:^(.*)$/$1/L  ,  ", "CN=Bob", "cn=bob"),
    ],
)
def test_mapping_rules_map_a_dn_as_kafka_does(rules: str | None, dn: str, name: str) -> None:
    assert SslPrincipalMapper(rules).name(dn) == name


def test_a_dn_no_rule_matches_is_refused() -> None:
    with pytest.raises(NoMatchingRuleError, match="No rules apply to CN=bob,O=other"):
        SslPrincipalMapper("RULE:^CN=(.*),O=acme$/$1/").name("CN=bob,O=other")


@pytest.mark.parametrize(
    "rules",
    ["DEFAULT junk", "RULE:^CN=(.*)$/$1/Lx", "RULE:^CN=(.*)$/$1", "RULE:^CN=(.*$/$1/", "NOTARULE"],
)
def test_an_unparsable_rule_is_refused(rules: str) -> None:
    with pytest.raises(ValueError, match="Invalid rule"):
        SslPrincipalMapper(rules)


@pytest.mark.parametrize(
    ("subject", "dn"),
    [
        (
            (
                (("organizationName", "acme"),),
                (("organizationalUnitName", "eng"),),
                (("commonName", "alice"),),
            ),
            "CN=alice,OU=eng,O=acme",
        ),
        (
            (
                (("countryName", "US"),),
                (("stateOrProvinceName", "CA"),),
                (("localityName", "Santa Clara"),),
                (("domainComponent", "example"),),
                (("commonName", "a"), ("userId", "u1")),
            ),
            "CN=a+UID=u1,DC=example,L=Santa Clara,ST=CA,C=US",
        ),
        ((((("commonName", "Smith, John <js>"),)),), "CN=Smith\\, John \\<js\\>"),
        (((("commonName", " #lead trail "),),), "CN=\\ #lead trail\\ "),
        # Java prints emailAddress as its OID with the hex of the IA5String
        (((("emailAddress", "a@b.c"),), (("commonName", "x"),)), "CN=x,1.2.840.113549.1.9.1=#16056140622e63"),
    ],
)
def test_the_subject_dn_is_printed_as_java_prints_it(
    subject: tuple[tuple[tuple[str, str], ...], ...], dn: str
) -> None:
    assert subject_dn(subject) == dn
