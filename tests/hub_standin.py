"""A stand-in for the Hugging Face Hub, in memory: what every publishing route uploads is recorded, nothing leaves the
machine. Tests get it as the `hub` fixture (tests/conftest.py).

It replaces the methods of `huggingface_hub.HfApi` that publishing calls (`create_repo`, `create_branch`,
`upload_folder`, `create_commit`) on the class, so every client goes through it: transformers' shared one, the
scripts' own. `upload_folder` filters the folder's files with huggingface_hub's own patterns and hands them to
`create_commit`, the one place where a commit is recorded. A model card read from the Hub (`ModelCard.load(repo_id)`,
as transformers' `push_to_hub` does) comes from the stand-in's repositories.
"""

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
from huggingface_hub import CommitOperationAdd, repocard
from huggingface_hub.errors import EntryNotFoundError
from huggingface_hub.utils import filter_repo_objects


# What the real `upload_folder` always leaves out (the folder's .git and huggingface_hub's cache).
DEFAULT_IGNORE_PATTERNS = huggingface_hub.hf_api.DEFAULT_IGNORE_PATTERNS


@dataclass
class Commit:
    repo_id: str
    files: dict[str, bytes]
    message: str
    revision: str | None = None
    create_pr: bool = False


@dataclass
class Repository:
    private: bool | None = None
    branches: set[str] = field(default_factory=lambda: {"main"})
    files: dict[str, bytes] = field(default_factory=dict)  # the main branch's


class HubStandIn:
    def __init__(self):
        self.repos: dict[str, Repository] = {}
        self.commits: list[Commit] = []

    def install(self, monkeypatch) -> "HubStandIn":
        hub = self

        def create_repo(api, repo_id, *, token=None, private=None, repo_type=None, exist_ok=False, **options):
            if repo_id in hub.repos and not exist_ok:
                raise ValueError(f"{repo_id} exists")
            hub.repos.setdefault(repo_id, Repository(private=private))
            return SimpleNamespace(repo_id=repo_id)

        def create_branch(api, repo_id, *, branch, token=None, repo_type=None, exist_ok=False, **options):
            hub.repos[repo_id].branches.add(branch)

        def upload_folder(api, *, repo_id, folder_path, allow_patterns=None, ignore_patterns=None, **options):
            folder = Path(folder_path)
            ignored = [ignore_patterns] if isinstance(ignore_patterns, str) else list(ignore_patterns or [])
            paths = sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file())
            chosen = filter_repo_objects(
                paths, allow_patterns=allow_patterns, ignore_patterns=ignored + DEFAULT_IGNORE_PATTERNS
            )
            operations = [CommitOperationAdd(path_in_repo=path, path_or_fileobj=folder / path) for path in chosen]
            message = options.pop("commit_message", None) or "Upload folder using huggingface_hub"
            commit_options = ("commit_description", "token", "revision", "create_pr")
            options = {name: value for name, value in options.items() if name in commit_options}
            return api.create_commit(repo_id, operations, commit_message=message, **options)

        def create_commit(api, repo_id, operations, *, commit_message, revision=None, create_pr=None, **options):
            if repo_id not in hub.repos:
                raise ValueError(f"{repo_id} does not exist: create_repo first")
            if revision is not None and not create_pr and revision not in hub.repos[repo_id].branches:
                raise ValueError(f"{repo_id} has no branch {revision}")
            files = {operation.path_in_repo: _read(operation.path_or_fileobj) for operation in operations}
            hub.commits.append(Commit(repo_id, files, commit_message, revision, bool(create_pr)))
            if revision in (None, "main") and not create_pr:
                hub.repos[repo_id].files.update(files)
            return SimpleNamespace(commit_url=f"https://huggingface.co/{repo_id}/commit/{len(hub.commits)}")

        def hf_hub_download(repo_id, filename, *, repo_type=None, **options):
            files = hub.repos[repo_id].files if repo_id in hub.repos else {}
            if filename not in files:
                raise EntryNotFoundError(f"{repo_id} has no {filename}")
            handle, path = tempfile.mkstemp(suffix=f"-{filename}")
            os.close(handle)
            Path(path).write_bytes(files[filename])
            return path

        for name, method in [
            ("create_repo", create_repo),
            ("create_branch", create_branch),
            ("upload_folder", upload_folder),
            ("create_commit", create_commit),
        ]:
            monkeypatch.setattr(huggingface_hub.HfApi, name, method)
        monkeypatch.setattr(repocard, "hf_hub_download", hf_hub_download)
        return self

    def uploaded(self, repo_id: str) -> dict[str, bytes]:
        """The files of the only commit to `repo_id` (a route uploads its folder in one commit)."""
        commits = [commit for commit in self.commits if commit.repo_id == repo_id]
        assert len(commits) == 1, f"{len(commits)} commits to {repo_id}: {[sorted(c.files) for c in commits]}"
        return commits[0].files

    def download(self, repo_id: str, folder: str | os.PathLike) -> Path:
        """Writes the files of `repo_id` into `folder`, as a download of the repository would."""
        folder = Path(folder)
        for path, content in self.repos[repo_id].files.items():
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).write_bytes(content)
        return folder


def _read(content) -> bytes:
    if isinstance(content, (str, os.PathLike)):
        return Path(content).read_bytes()
    return content if isinstance(content, bytes) else content.read()
