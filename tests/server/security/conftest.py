"""Fixtures shared by the security tests: ``pki``, one set of test certificates per module
(``tests.support.certs.tls_material``: a CA, the broker's keystore, clients alice and bob, mallory from
another CA), made at test time."""

from __future__ import annotations

import pytest
from tests.support.certs import TlsMaterial, tls_material


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return tls_material(tmp_path_factory.mktemp("pki"))
