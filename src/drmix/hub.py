"""Upload a model drmix wrote, with its card and report, to the Hugging Face Hub (``huggingface_hub``).

:func:`push_to_hub` takes a run folder (with ``model/``), a pipeline folder (whose ``model`` link names
the selected model) or a model folder itself, and makes one commit to the model repository
``repo_id`` (created if missing): the model folder's files at the repository root (so
``SentenceTransformer(repo_id)`` loads it; its README.md is the drmix model card, with the usage
snippet pointed at ``repo_id``), ``report.html`` beside them, and the run's small records
(configuration, metrics, weights, evaluation tables) under ``drmix/``. Checkpoints and indexes are not
uploaded.

Failures become one :class:`~drmix.errors.DrmixError` that says what to do: offline mode
(``HF_HUB_OFFLINE``), no network, no or a wrong token, a repository you cannot write to.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from drmix.errors import ConfigError, DrmixError

log = logging.getLogger(__name__)

#: run records uploaded under drmix/ when present
RUN_FILES = ("config.yaml", "pipeline.yaml", "metrics.jsonl", "weights.json", "weights.jsonl", "weights.png",
             "eval.json", "eval.md", "compare.md", "compare.json", "summary.md", "summary.json", "results.md",
             "results.json", "eval/eval.json", "eval/eval.md", "compare/compare.md", "compare/compare.json")
PLACEHOLDER_ID = "sentence_transformers_model_id"


class HubError(DrmixError):
    """The Hub could not be reached or refused the upload."""


@dataclass
class PushResult:
    repo_id: str
    url: str
    commit: str | None
    files: list[str]


def model_folder_of(folder: str | Path) -> tuple[Path, Path | None]:
    """``(model folder, run folder or None)`` for a run, a pipeline or a model folder."""
    p = Path(folder).expanduser()
    if not p.exists():
        raise ConfigError("no such folder.", path=p, fix="pass a drmix run folder (with model/) or a model folder.")
    model = p / "model"
    if (model / "modules.json").is_file():  # a run (its root's modules.json points into model/)
        return model.resolve(), p
    if (p / "modules.json").is_file() or (p / "config_sentence_transformers.json").is_file():
        return p, None
    raise ConfigError("the folder holds no model (no model/modules.json and no modules.json).", path=p,
                      fix="pass a finished run folder, a pipeline folder or a SentenceTransformer folder.")


def check_can_push(repo_id: str, folder: str | Path | None = None) -> None:
    """Fail before a run starts when its ``--push-to-hub`` could not succeed (a bad id, offline mode)."""
    from huggingface_hub import constants

    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ConfigError(f"{repo_id!r} is not a Hub repository id.", fix="write it as USER/NAME or ORG/NAME.")
    if constants.is_offline_mode():
        raise HubError("--push-to-hub was given but the Hugging Face Hub is switched off here (HF_HUB_OFFLINE or "
                       "TRANSFORMERS_OFFLINE is set).", path=folder,
                       fix="unset them, or run without --push-to-hub and upload later with drmix push.")


def _operations(model_dir: Path, run_dir: Path | None, repo_id: str) -> list:
    """The files of one commit. A run without ``report.html`` gets one rendered in memory for the upload:
    push writes nothing local (docs/outputs.md)."""
    from huggingface_hub import CommitOperationAdd

    ops = []
    for f in sorted(model_dir.rglob("*")):
        if not f.is_file() or any(part.startswith(".") for part in f.relative_to(model_dir).parts):
            continue
        rel = f.relative_to(model_dir).as_posix()
        if rel == "README.md":
            from drmix.report.card import point_usage_at

            # the snippet loads the repository (cards name the local folder, or older ones the placeholder)
            text = point_usage_at(f.read_text(encoding="utf-8").replace(PLACEHOLDER_ID, repo_id), repo_id)
            ops.append(CommitOperationAdd(rel, text.encode("utf-8")))
        else:
            ops.append(CommitOperationAdd(rel, str(f)))
    if run_dir is not None:
        if (run_dir / "report.html").is_file():
            ops.append(CommitOperationAdd("report.html", str(run_dir / "report.html")))
        elif (run_dir / "metrics.jsonl").is_file():
            from drmix.report.html import render_report

            ops.append(CommitOperationAdd("report.html", render_report(run_dir).encode("utf-8")))
        for name in RUN_FILES:
            if (run_dir / name).is_file():
                ops.append(CommitOperationAdd(f"drmix/{name}", str(run_dir / name)))
    return ops


def push_to_hub(folder: str | Path, repo_id: str, *, token: str | None = None, private: bool | None = None,
                endpoint: str | None = None, revision: str | None = None,
                commit_message: str | None = None) -> PushResult:
    """Upload ``folder``'s model, card and report to ``repo_id`` in one commit; see the module docstring."""
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ConfigError(f"{repo_id!r} is not a Hub repository id.", fix="write it as USER/NAME or ORG/NAME.")
    model_dir, run_dir = model_folder_of(folder)
    if constants.is_offline_mode():
        raise HubError("the Hugging Face Hub is switched off here (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is set).",
                       path=folder, fix=f"unset HF_HUB_OFFLINE and TRANSFORMERS_OFFLINE, then run "
                                        f"`drmix push {folder} {repo_id}`; nothing was uploaded.")
    api = HfApi(endpoint=endpoint, token=token)
    ops = _operations(model_dir, run_dir, repo_id)
    try:
        repo = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        info = api.create_commit(repo_id, ops, commit_message=commit_message or "Upload model trained with drmix",
                                 revision=revision, repo_type="model")
    except OfflineModeIsEnabled:
        raise HubError("the Hugging Face Hub is switched off here (offline mode).", path=folder,
                       fix="unset HF_HUB_OFFLINE and TRANSFORMERS_OFFLINE; nothing was uploaded.") from None
    except HfHubHTTPError as e:
        status = getattr(getattr(e, "response", None), "status_code", None)
        fix = ("log in with `hf auth login` or set HF_TOKEN to a token with write access"
               if status in (401, 403) else "check the repository id and your access to it")
        raise HubError(f"the Hub refused the upload (HTTP {status}: {str(e).splitlines()[0][:200]}).",
                       path=folder, fix=fix + "; nothing was uploaded.") from None
    except (OSError, ValueError) as e:  # connection refused, DNS, TLS; httpx errors derive from these or are wrapped
        raise HubError(f"cannot reach the Hugging Face Hub ({type(e).__name__}: {str(e)[:200]}).", path=folder,
                       fix="check the network connection (or HF_ENDPOINT); nothing was uploaded.") from None
    except Exception as e:  # noqa: BLE001 - httpx transport errors do not share a base with OSError
        if type(e).__module__.startswith(("httpx", "httpcore")):
            raise HubError(f"cannot reach the Hugging Face Hub ({type(e).__name__}: {str(e)[:200]}).", path=folder,
                           fix="check the network connection (or HF_ENDPOINT); nothing was uploaded.") from None
        raise
    url = str(getattr(repo, "url", "") or f"{api.endpoint}/{repo_id}")
    log.info("pushed %d files to %s", len(ops), url)
    return PushResult(repo_id, url, getattr(info, "oid", None), [op.path_in_repo for op in ops])
