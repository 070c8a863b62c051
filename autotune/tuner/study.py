"""Optuna plumbing of a tuning study: its storage, its sampler, its name, opening or
resuming it (the loop itself is :mod:`autotune.tuner.loop`)."""

from __future__ import annotations

import logging
import os
import time
import warnings
from pathlib import Path
from typing import Any

import optuna

from autotune.exceptions import AutotuneError
from autotune.tuner.config import SAMPLERS, SEEDS, TuneConfig
from autotune.tuner.journal import BatchedJournalStorage, OwnedLock, mend_journal
from autotune.tuner.leases import heartbeat_kwargs
from costmodel.spec import Target
from search_space.atomic import file_head
from search_space.ir import Graph

__all__ = [
    "DEFAULT_STORAGE",
    "SAMPLERS",
    "check_params",
    "drop_if_empty",
    "fresh_name",
    "journal_path",
    "make_sampler",
    "measured_name",
    "open_storage",
    "open_study",
    "opening",
    "study_name",
]

log = logging.getLogger(__name__)
DEFAULT_STORAGE = "autotune.journal"
PSYCOPG = "postgresql+psycopg"  # SQLAlchemy's dialect for psycopg 3
CONNECT_TIMEOUT_S = 10
SCHEMA_RETRY_S = (0.2, 0.5, 1.0)  # waits before opening a storage again (see _first_storage)


def open_storage(url: str | None) -> tuple[optuna.storages.BaseStorage | str, str]:
    """The study storage and how to name it. Default: ``./autotune.journal`` (journal file).

    Raises:
        AutotuneError: a storage that cannot be opened.
    """
    path = journal_path(url)
    if path is not None:
        if not path.parent.is_dir():
            raise AutotuneError(f"storage folder '{path.parent}' does not exist; create it first")
        if path.is_dir():
            raise AutotuneError(f"storage '{path}' is a folder; give a .journal file path")
        _check_writable(path)
        if file_head(path, 1) not in (b"", b"{"):
            raise AutotuneError(
                f"storage '{path}' is not an Optuna journal (its first byte is not a JSON "
                "record); give a new .journal path"
            )
        from autotune.tuner.journal_append import WholeAppendBackend

        mended = mend_journal(path)
        if mended:
            log.warning(mended)
        backend = WholeAppendBackend(str(path), lock_obj=OwnedLock(path))
        return BatchedJournalStorage(backend, path), str(path)
    assert url is not None
    if "://" not in url:
        raise AutotuneError(
            f"storage '{url}' is neither a .journal file nor an Optuna URL "
            "(e.g. sqlite:///autotune.db, postgresql://user@host/db)"
        )
    return _rdb(url), url


def _check_writable(path: Path) -> None:
    """A journal is written from its first use (its lock is a link beside it, a study's
    every trial is appended): its folder, and the file when there is one, must be writable.

    Raises:
        AutotuneError: a read-only file system, or no permission.
    """
    where = path if path.exists() else path.parent
    if os.access(path.parent, os.W_OK | os.X_OK) and os.access(where, os.W_OK):
        return
    why = "is on a read-only file system" if _read_only(where) else "cannot be written"
    raise AutotuneError(
        f"storage '{path}': {'it' if where == path else 'its folder'} {why}; give a --storage "
        "in a folder you can write (copy the journal there to resume it)"
    )


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def journal_path(url: str | None) -> Path | None:
    """The journal file a storage argument names (the default when None); None for a URL."""
    if url is None or url.endswith(".journal") or url.startswith("journal:"):
        return Path(url.removeprefix("journal:") if url else DEFAULT_STORAGE)
    return None


def _rdb(url: str) -> optuna.storages.BaseStorage:
    """An RDB storage, opened now so a bad URL is one line, not a traceback mid-study.
    PostgreSQL goes through psycopg 3 (the ``postgres`` extra) and gives up connecting after
    ``CONNECT_TIMEOUT_S`` (libpq would wait for as long as the network does)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, DatabaseError, NoSuchModuleError, OperationalError

    scheme = driver = url.split("://", 1)[0]
    engine: dict[str, Any] = {}
    try:
        parsed = make_url(url)
        if parsed.drivername in ("postgresql", "postgres"):
            # SQLAlchemy 2.0 reads a bare postgresql:// as psycopg2, which we do not ship
            parsed = parsed.set(drivername=PSYCOPG)
            url = parsed.render_as_string(hide_password=False)
        driver = parsed.drivername
        if parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query:
            engine["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT_S}
        return _first_storage(url, engine)
    except ImportError as err:
        if driver == PSYCOPG:
            raise AutotuneError(
                f"storage '{scheme}://...' needs the PostgreSQL driver psycopg 3, which is not "
                "installed: pip install 'ascend-autofusion[postgres]'"
            ) from None
        hint = "; postgresql://... needs only pip install 'ascend-autofusion[postgres]'"
        raise AutotuneError(
            f"storage '{scheme}://...': its database driver is not installed "
            f"({_first_line(err)}){hint if 'postgres' in scheme else ''}"
        ) from None
    except (NoSuchModuleError, ArgumentError) as err:
        raise AutotuneError(
            f"storage URL scheme '{scheme}' is not a database SQLAlchemy knows "
            f"({str(err).splitlines()[0]}); use sqlite:///FILE, postgresql://... or a .journal"
        ) from None
    except OperationalError as err:
        raise AutotuneError(
            f"cannot open storage '{scheme}://...': {_first_line(err.orig)}; check the URL "
            "(and that its server is up)"
        ) from None
    except DatabaseError as err:  # e.g. a user who may not create the tables
        raise AutotuneError(
            f"cannot set up storage '{scheme}://...': {_first_line(err.orig)}"
        ) from None


def _first_storage(url: str, engine: dict[str, Any]) -> optuna.storages.RDBStorage:
    """Open an RDB storage; on a new database, workers starting together all create Optuna's
    tables, and all but one fail on a name the winner just took: they open it again."""
    from sqlalchemy.exc import IntegrityError, ProgrammingError

    def storage() -> optuna.storages.RDBStorage:
        with warnings.catch_warnings():  # the heartbeat is experimental, and what we rely on
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RDBStorage(url, engine_kwargs=engine, **heartbeat_kwargs())

    for wait_s in SCHEMA_RETRY_S:
        try:
            return storage()
        except (IntegrityError, ProgrammingError):
            log.debug("storage tables being created by another worker; again in %gs", wait_s)
            time.sleep(wait_s)
    return storage()


def _first_line(err: BaseException | None) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def make_sampler(name: str, seed: int, offset: int, multi: bool) -> optuna.samplers.BaseSampler:
    """A sampler by name; ``offset`` (trials already run) moves the seed on when resuming.

    Raises:
        AutotuneError: unknown sampler, or one whose optional dependency is missing.
    """
    s = (seed + offset) % SEEDS  # any seed a study was started with, however far it went
    if name == "tpe":
        with warnings.catch_warnings():  # `group` is marked experimental; it is what we need
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(
                seed=s,
                multivariate=True,
                group=True,
                n_startup_trials=10,
            )
    if name == "random":
        return optuna.samplers.RandomSampler(seed=s)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=s, population_size=20)
    if name == "cmaes":
        if multi:
            raise AutotuneError("cmaes is single-objective; use nsga2 or tpe for latency,memory")
        try:
            import cmaes  # noqa: F401
        except ImportError:
            raise AutotuneError(
                "the cmaes sampler needs the cmaes package: pip install cmaes"
            ) from None
        return optuna.samplers.CmaEsSampler(
            seed=s, warn_independent_sampling=False, n_startup_trials=3
        )
    if name == "gp":
        try:
            import torch  # noqa: F401
        except ImportError:
            raise AutotuneError(
                "the gp sampler needs torch (an optional extra): pip install torch==2.13.0, "
                "or pick --sampler tpe"
            ) from None
        return optuna.samplers.GPSampler(seed=s)
    raise AutotuneError(f"unknown sampler '{name}'; available: {', '.join(SAMPLERS)}")


def study_name(graph: Graph, target: Target, config: TuneConfig, name: str) -> str:
    """The default study name: model, graph fingerprint, target, strategy and what changes
    the trials' meaning (two objectives, a numeric sampler, a non-default cost model)."""
    numeric = config.sampler in ("cmaes", "gp")
    return (
        f"{name}-{graph.fingerprint()[:8]}-{target.spec.name}-{config.strategy}"
        f"{'-mo' if config.multi else ''}{'-num' if numeric else ''}"
        f"{'' if config.cost == 'learned' else '-' + config.cost}"
    )


def open_study(
    storage: optuna.storages.BaseStorage | str, name: str, config: TuneConfig
) -> tuple[optuna.Study, int]:
    """Create or resume the study, with its sampler seeded past the trials it has.

    Returns:
        The study and how many trials it had before this run.

    Raises:
        AutotuneError: an existing study of that name with other directions.
    """
    directions = [optuna.study.StudyDirection.MINIMIZE] * (2 if config.multi else 1)
    make_sampler(config.sampler, config.seed, 0, config.multi)  # one it cannot make: no study
    try:
        probe = optuna.create_study(
            storage=storage, study_name=name, directions=directions, load_if_exists=True
        )
    except ValueError as err:  # e.g. an existing study with other directions
        raise AutotuneError(f"study '{name}': {err}") from None
    done = len(probe.trials)
    sampler = make_sampler(config.sampler, config.seed, done, config.multi)
    return optuna.load_study(storage=storage, study_name=name, sampler=sampler), done


def check_params(study: optuna.Study, known: frozenset[str] | set[str]) -> None:
    """Check that the study's trials name only fusion parameters of ``known`` (the space's:
    ``SearchSpace.known_params``); a trial of another space would replay as another plan.

    Raises:
        AutotuneError: a study made by an autotune before readable parameter names
            (``fuse/Add>Transpose:fc4e81d4``), or over another graph partition (another
            ``no_fusion_ops``, ``max_fused_ops`` or ``share_repeated``).
    """
    for t in study.get_trials(deepcopy=False):
        stale = next((n for n in t.params if n.startswith("fuse/") and n not in known), None)
        if stale is not None:
            raise AutotuneError(
                f"study '{study.study_name}' was tuned over other fusion parameters ('{stale}': "
                "an older autotune, or another fusion policy); start a fresh study with --new"
            )


def measured_name(name: str) -> str:
    """The study that holds the plans study ``name`` measured (:mod:`autotune.tuner.ledger`)."""
    return f"{name}:measured"


def fresh_name(storage: optuna.storages.BaseStorage | str, name: str, given: bool) -> str:
    """The name of a new study (``--new``): ``name`` where the storage has no study of it,
    else the first of ``name-2``, ``name-3``... that is free; a ``--study`` name the user
    ``given`` is never renamed.

    Raises:
        AutotuneError: a given name the storage already holds.
    """
    taken = set(optuna.get_all_study_names(storage))
    if name not in taken:
        return name
    if given:
        raise AutotuneError(
            f"--new: the storage already has a study '{name}'; give another --study name, "
            "or leave out --new to resume it"
        )
    return next(f"{name}-{n}" for n in range(2, len(taken) + 3) if f"{name}-{n}" not in taken)


def opening(study: optuna.Study, storage_name: str, done: int) -> str:
    """One line that says which study a run works on: a new one, or what it resumes."""
    if not done:
        return f"new study '{study.study_name}' in {storage_name}"
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    best = min((t.values[0] for t in complete), default=None)
    tail = f", best {best:.1f} us predicted" if best is not None else ""
    return (
        f"resuming study '{study.study_name}' in {storage_name}: {len(complete)} of its "
        f"{done} trials complete{tail} (--new starts a fresh one)"
    )


def drop_if_empty(storage: optuna.storages.BaseStorage | str, names: list[str]) -> None:
    """Delete the studies ``names`` where they have no complete trial: what a run that made
    them and then failed leaves (a failed start leaves no empty study behind)."""
    for name in names:
        try:
            study = optuna.load_study(study_name=name, storage=storage)
        except KeyError:
            continue
        if not any(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials):
            optuna.delete_study(study_name=name, storage=storage)
