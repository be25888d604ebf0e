"""Fetching transformers' common model tests (`transformers_common_tests.py`): without the package registry the tests
skip with the reason, but under `CI=true` they fail, so that CI never passes without running them."""

import pytest
import transformers_common_tests


def _offline(monkeypatch, tmp_path):
    monkeypatch.setenv("BLOCKBERT_TRANSFORMERS_TESTS_CACHE", str(tmp_path))  # an empty cache: the file is fetched

    def unreachable(folder):
        raise OSError("pip download of transformers's source failed: no index reachable")

    monkeypatch.setattr(transformers_common_tests, "_fetch", unreachable)


def test_without_the_registry_the_common_tests_skip_with_the_reason(monkeypatch, tmp_path):
    _offline(monkeypatch, tmp_path)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="unavailable .*no index reachable.*need the package registry"):
        transformers_common_tests.common_test_module()


def test_under_ci_they_fail_instead(monkeypatch, tmp_path):
    _offline(monkeypatch, tmp_path)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="under CI=true they must run"):
        transformers_common_tests.common_test_module()
