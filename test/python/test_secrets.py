"""Secrets through the Python SDK: Secret.create/list/get_info/update/exists/destroy, AsyncSecret, bad input."""

from pathlib import Path

import pytest
from e2b import AsyncSecret, AuthenticationException, Secret, SecretException, SecretNotFoundException

from helpers import unique


def test_secret_lifecycle_and_versions(control_plane):
    name = unique("Py-Secret")
    value = unique("py-canary-value")
    info = Secret.create(name, value, metadata={"owner": "python"})
    try:
        assert info.secret_id.startswith("sec_")
        assert info.name == name.lower()
        assert info.version == 1
        assert info.metadata == {"owner": "python"}
        assert Secret.get_info(name.upper()).secret_id == info.secret_id

        v2 = Secret.update(info.secret_id, unique("py-canary-v2"))
        assert v2.version == 2 and v2.metadata == {"owner": "python"}
        v3 = Secret.update(name, unique("py-canary-v3"), metadata={"owner": "ops"})
        assert v3.version == 3 and v3.metadata == {"owner": "ops"}
        assert v3.updated_at >= info.created_at
        assert Secret.exists(name)
        assert Secret.fill(name) == "${e2b.secrets." + name + "}"

        # The value is in no answer (raw REST) and not in the database file.
        with control_plane.api() as c:
            raw = c.get(f"/secrets/{info.secret_id}").text
        assert value not in raw
        assert value.encode() not in (Path(control_plane.data_dir) / "locale2b.db").read_bytes()
    finally:
        assert Secret.destroy(info.secret_id) is True
    assert Secret.destroy(info.secret_id) is False
    assert not Secret.exists(name)
    with pytest.raises(SecretNotFoundException):
        Secret.get_info(info.secret_id)
    with pytest.raises(SecretNotFoundException):
        Secret.update(name, "x")


def test_secret_list_pages():
    prefix = unique("pypage")
    names = [f"{prefix}-{i}" for i in range(5)]
    for n in names:
        Secret.create(n, f"value-of-{n}")
    try:
        pager = Secret.list(limit=2)
        seen = []
        pages = 0
        while pager.has_next:
            seen += [s.name for s in pager.next_items()]
            pages += 1
        assert [n for n in seen if n.startswith(prefix)] == names
        assert pages >= 3
    finally:
        for n in names:
            Secret.destroy(n)


def test_secret_bad_input_and_keys():
    with pytest.raises(SecretException, match="invalid secret name"):
        Secret.create("no spaces please", "v")
    with pytest.raises(SecretException, match="must not be empty"):
        Secret.create(unique("empty"), "")
    with pytest.raises(SecretException, match="at most 65536 bytes"):
        Secret.create(unique("big"), "x" * (64 * 1024 + 1))
    taken = unique("taken")
    Secret.create(taken, "v1")
    try:
        with pytest.raises(SecretException, match="exists"):
            Secret.create(taken.upper(), "v2")
    finally:
        Secret.destroy(taken)
    with pytest.raises(AuthenticationException):
        Secret.get_info(taken, api_key="e2b_" + "0" * 40)


@pytest.mark.asyncio
async def test_async_secret():
    name = unique("async-secret")
    info = await AsyncSecret.create(name, "async-value")
    assert (await AsyncSecret.update(name, "async-value-2")).version == 2
    assert await AsyncSecret.destroy(info.secret_id) is True
    assert await AsyncSecret.exists(name) is False
