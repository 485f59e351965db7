"""``TrainerConfig``: everything one run needs, frozen, validated and JSON-serialisable.

Nested configs are typed (:class:`~feudal_es.es.ESConfig`,
:class:`~feudal_es.mappo.MAPPOConfig`, :class:`agents.ActorConfig`,
:class:`agents.CriticConfig`); a plain dict of their fields is accepted anywhere (JSON
files, ``--set``, Python) and validated on construction, with "did you mean" for a
misspelled field. :data:`COMPACT_ACTOR` is the CPU-sized actor the demo and the studies
share; :func:`demo_config` is what ``feudal-es demo`` trains.

Defaults by observation kind: the settings of :data:`OBSERVATION_DEFAULTS` (the actor, the
critic, the MAPPO budget per round) and ``num_skills`` depend on the env. What the user
gives is used as given; each of these settings the user does not give is listed in
:attr:`TrainerConfig.auto` and filled when the run starts
(:func:`with_env_defaults`): a vector-observation env gets :data:`VEC_ACTOR` and the
MAPPO budget of ``configs/rover.json``, an image one the CNN actor of the class defaults,
and an env without skill rewards one option. "Given" means: a keyword passed to
``TrainerConfig(...)`` (a nested config passed as a dict gives its keys only, an instance
all of its fields), a key of a ``--config`` file (:meth:`TrainerConfig.load`), a ``--set``
(:meth:`TrainerConfig.override`). A stored config (a run's ``config.json``, a
checkpoint's) is read with :meth:`TrainerConfig.from_dict`, which gives every setting:
a resumed run keeps the config it was started with.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agents import ActorConfig, CriticConfig
from envs.validate import check_bool, check_int, check_ints, check_number
from feudal_es.evolution import ESConfig
from feudal_es.mappo import MAPPOConfig
from feudal_es.modes import MODES as _MODES
from feudal_es.modes import Mode, mode
from feudal_es.opponents import check_settings

__all__ = ["AUTO_SETTINGS", "BACKENDS", "COMPACT_ACTOR", "MODES", "NESTED_CONFIGS",
           "OBSERVATION_DEFAULTS", "OBSERVATION_KINDS", "SEED_MAX", "VEC_ACTOR",
           "TrainerConfig", "check_seed", "demo_config", "parse_assignment"]

MODES = tuple(_MODES)  # what TrainerConfig.mode may name (feudal_es.modes says what each does)
BACKENDS = ("serial", "ray")
NESTED_CONFIGS: dict[str, type] = {"es": ESConfig, "mappo": MAPPOConfig, "actor": ActorConfig,
                                   "critic": CriticConfig}
# the largest seed: jax.random.key keeps the low 32 bits of a seed (without jax_enable_x64),
# so 2**32 would give seed 0's key, and 2**63 or more does not convert at all
SEED_MAX = 2**32 - 1
# settings that moved to their owner: old dotted path -> new one (older config files,
# checkpoints and --set spellings still read)
MOVED = {"mappo.selector_period": "actor.selector_period"}

# A compact actor for CPU runs: the default CNN/GNN sizes compile and run slowly on a
# laptop-class CPU; this one keeps `feudal-es demo` within a couple of minutes.
COMPACT_ACTOR = ActorConfig(cnn_channels=(8,), cnn_strides=(2,), cnn_out=16, vec_hidden=(32,),
                            vec_out=16, gnn_hops=2, gnn_layers=1, gnn_features=32,
                            embed_hidden=(), embed_dim=32, executor_hidden=(32,))


# An MLP actor for vector observations (obs_mode="vec"): one 64-unit layer per agent, no
# graph filter, the 64-d embedding, a 64-unit executor layer; ~4x cheaper per sample than
# the compact CNN actor, so MAPPO trains at the speed of the JaxMARL baselines
VEC_ACTOR = ActorConfig(vec_hidden=(), vec_out=64, gnn_layers=0, embed_hidden=(), embed_dim=64,
                        executor_hidden=(64,), activation="relu")

OBSERVATION_KINDS = ("vector", "image")  # an env with any image (rank 2/3) entry: "image"
# What a setting the user did not give becomes, by the env's observation kind (dotted
# paths; a setting absent here keeps its class default). "vector": VEC_ACTOR, the small
# critic and the MAPPO budget of configs/rover.json (4 train steps of 32 envs x 50 steps
# = 6400 env steps per round, 25x the class defaults' 256): on a vector env the class
# defaults' large actor and 256 steps per round do not visibly learn in tens of rounds.
# "image": the class defaults (the CNN actor).
OBSERVATION_DEFAULTS: dict[str, dict[str, Any]] = {
    "vector": {
        **{f"actor.{k}": getattr(VEC_ACTOR, k) for k in (
            "vec_hidden", "vec_out", "gnn_layers", "embed_hidden", "embed_dim",
            "executor_hidden")},
        "critic.hidden": (64, 64), "critic.layer_norm": False,
        "grad_steps_per_outer": 4,
        "mappo.num_envs": 32, "mappo.num_steps": 50, "mappo.epochs": 4,
        "mappo.minibatches": 4, "mappo.lr": 3e-3, "mappo.critic_lr": 3e-3,
    },
    "image": {},
}
# every setting the defaults by observation kind may fill (TrainerConfig.auto lists those
# a config leaves open); num_skills: 1 (one option) for an env without skill_names
AUTO_SETTINGS: tuple[str, ...] = tuple(sorted(
    {p for d in OBSERVATION_DEFAULTS.values() for p in d} | {"num_skills"}))
_BUDGET = ("grad_steps_per_outer", "mappo.num_envs", "mappo.num_steps")


def check_seed(name: str, value: Any) -> int:
    """``value`` as a seed: an int in ``[0, SEED_MAX]``, so that each seed has its own
    ``jax.random.key`` (``ValueError`` / ``TypeError`` naming ``name`` and the range)."""
    value = check_int(name, value, 0)
    if value > SEED_MAX:
        raise ValueError(f"{name} must be <= {SEED_MAX} (2**32 - 1: jax.random.key keeps 32 "
                         f"bits of a seed, so a larger one repeats a smaller one's key), got "
                         f"{value}")
    return value


def _move_settings(owner: str, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (the nested configs, as given) with every :data:`MOVED` setting given at
    its old path moved to its new one; refused when both paths give different values."""
    out = dict(values)
    for old, new in MOVED.items():
        (src, key), (dst, new_key) = old.split("."), new.split(".")
        if not isinstance(out.get(src), Mapping) or key not in out[src]:
            continue
        moved = {k: v for k, v in out[src].items() if k != key}
        value = out[src][key]
        target = out.get(dst, {})
        if isinstance(target, Mapping):
            if new_key in target and target[new_key] != value:
                raise ValueError(f"{owner}: {old}={value!r} and {new}={target[new_key]!r} "
                                 f"disagree ({old} is the older name of {new}; give one)")
            target = {**target, new_key: value}
        else:  # an instance: a field left at its default yields; another value conflicts
            current = getattr(target, new_key)
            default = next(f.default for f in dataclasses.fields(target) if f.name == new_key)
            if current != value and current != default:
                raise ValueError(f"{owner}: {old}={value!r} and {new}={current!r} disagree "
                                 f"({old} is the older name of {new}; give one)")
            target = dataclasses.replace(target, **{new_key: value})
        out[src], out[dst] = moved, target
    return out


def _nested(owner: str, name: str, value: Any) -> Any:
    """A nested config from an instance or a dict of its fields (lists become tuples)."""
    cls = NESTED_CONFIGS[name]
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(f"{owner}.{name} must be a {cls.__name__} or a dict of its fields, "
                        f"got {type(value).__name__}")
    fields = {f.name for f in dataclasses.fields(cls)}
    for k in value:
        if k not in fields:
            close = difflib.get_close_matches(str(k), sorted(fields), n=3)
            hint = f"; did you mean {close}?" if close else f"; fields: {sorted(fields)}"
            raise ValueError(f"{owner}.{name} has no field {k!r}{hint}")
    try:
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in value.items()})
    except (TypeError, ValueError) as e:
        raise type(e)(f"{owner}.{name}: {e}") from None


def _open_settings(given: Mapping[str, Any]) -> tuple[str, ...]:
    """The :data:`AUTO_SETTINGS` that ``given`` (top-level settings as given: a nested
    config as a dict gives its keys, an instance every field) leaves open."""
    out = []
    for path in AUTO_SETTINGS:
        head, _, leaf = path.partition(".")
        if head not in given or (leaf and isinstance(given[head], Mapping)
                                 and leaf not in given[head]):
            out.append(path)
    return tuple(out)


def _assigns(path: str, given: Mapping[str, Any]) -> bool:
    """Whether the dotted assignments ``given`` set the setting ``path``."""
    head, _, leaf = path.partition(".")
    if path in given:
        return True
    if leaf and head in given:
        value = given[head]
        return not isinstance(value, Mapping) or leaf in value
    return False


def _class_default(path: str) -> Any:
    """The class default of the setting ``path`` (e.g. ``"mappo.num_steps"``)."""
    head, _, leaf = path.partition(".")
    if not leaf:
        return next(f.default for f in dataclasses.fields(TrainerConfig) if f.name == head)
    return next(f.default for f in dataclasses.fields(NESTED_CONFIGS[head])
                if f.name == leaf)


def _value(config: Any, path: str) -> Any:
    for part in path.split("."):
        config = getattr(config, part)
    return config


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    """Everything a run needs (frozen, validated; errors name the field).

    The settings the user did not give that depend on the env (:data:`AUTO_SETTINGS`)
    are listed in :attr:`auto` and filled by :func:`with_env_defaults` when the run
    starts (see the module docstring). ``TrainerConfig(...)`` and :meth:`load` leave open
    what they are not given; :meth:`from_dict` (stored configs) gives every setting.
    """

    env: str = "feudal_es/Coverage-v0"  # registry id or "module:attr"
    env_kwargs: dict = dataclasses.field(default_factory=dict)  # passed to the env
    mode: str = "merl"  # one of MODES
    n_outer: int = 20  # merl_coexist outer rounds
    grad_steps_per_outer: int = 1  # MAPPO train steps per round
    episodes: int = 4  # episodes per team-fitness evaluation
    deterministic_eval: bool = True  # executor mode (not a sample) during fitness episodes
    seed: int = 0  # every random key of the run: network init, env episodes, ES noise
    # many seeds in one program (feudal_es.seeds): () = the one run of ``seed``; else every
    # seed listed, each a run of this config with that seed, in run_dir/seed_<s>/
    seeds: tuple[int, ...] = ()
    # mode merl-actor: rounds of its first stage (ES on the selector only, the learner's
    # executor injected, as merl) before whole-actor ES with elitist migration
    # (feudal_es.migration); 0 = migration from the first round
    selector_stage_rounds: int = 0
    es: ESConfig = dataclasses.field(default_factory=ESConfig)
    mappo: MAPPOConfig = dataclasses.field(default_factory=MAPPOConfig)
    actor: ActorConfig = dataclasses.field(default_factory=ActorConfig)
    critic: CriticConfig = dataclasses.field(default_factory=CriticConfig)
    # host envs without ``skill_names``: the selector's options per agent, one channel
    # each of ``infos[agent]["skill_rewards"]``. 1 = one option, the selector idle (K
    # options without skill rewards all train on the agent's own reward)
    num_skills: int = 1
    checkpoint_every: int = 5  # rounds between checkpoints (the last round always saves)
    keep_checkpoints: int = 3  # newest checkpoints kept
    plot_every: int = 1  # rounds between learning-curve refreshes (the last always)
    gif: bool = True  # write a final deterministic episode GIF (if the env renders)
    max_episode_steps: int = 10_000  # host envs: cap on an evaluation episode's length
    # host envs: seconds an evaluation episode (and one MAPPO-collection env call) may
    # take; over it the member fails / collection stops with EnvTimeout. 0 = no limit
    episode_timeout: float = 0.0
    # JAX envs: devices the ES population is sharded over (feudal_es.sharding); 0 = all
    # of jax.devices() (no sharding when there is one), 1 = never shard, n = the first n
    population_devices: int = 0
    # JAX envs: devices one seed's MAPPO step runs on data-parallel (its env copies split
    # over them, gradients averaged: feudal_es.mappo.parallel; the fused update only).
    # 0 = automatic: as many as fit (they must divide mappo.num_envs, and minibatches each
    # device's samples) of the devices the seeds leave (all of them for one seed), 1 = one
    # device, n = exactly n
    data_parallel: int = 0
    # JAX envs: ES members evaluated together per chunk (per device when sharded): the
    # population rollout is a lax.map(batch_size=...) over vmapped chunks, a remainder
    # chunk included. 0 = automatic: feudal_es.rollout.CPU_POPULATION_CHUNK on a CPU
    # backend, where the full-width batch's activations overflow the caches, the whole
    # population otherwise (a GPU wants the full width); n >= the population = one vmap
    population_chunk: int = 0
    # a pretrained actor to start from (``feudal-es pretrain``'s output; "" = random init)
    init_from: str = ""
    # modules the run was started with (--import): recorded only, so that eval, render and
    # --resume can name the --import to pass; a run directory never imports them itself
    imports: tuple[str, ...] = ()
    backend: str = "serial"  # host envs: "serial" (in-process loop) | "ray" (Ray actors)
    # agents that differ in their spaces share one actor, padded to one observation and
    # action space with an agent indicator appended (SuperSuit on the host path, the same
    # rules for JaxMARL envs; feudal_es.padding); false: one actor per agent group
    pad_agents: bool = False
    # agents in groups (envs.groups), a mixed cooperative / competitive env: the group that
    # is the team, its mean reward the team fitness (unless the env reports one); "" =
    # every group trains on the one team fitness (team_reward, else every agent's)
    team: str = ""
    # groups of your own: group name -> agent names (e.g. two teams of equal agents); the
    # agents it does not name are grouped by their spaces
    groups: dict = dataclasses.field(default_factory=dict)
    # with a named team, what every other group does (feudal_es.opponents): "random"; a
    # scripted JAX policy "module:function"; a saved run whose actor plays it, frozen; or
    # "train" (each group on its own fitness: its agents' mean reward)
    others: str = "random"
    ray_workers: int = 0  # backend "ray": actors evaluating members; 0 = Ray's CPU count
    # host envs, modes with MAPPO: worker processes (Ray actors with backend "ray") that
    # step MAPPO's env copies, each its share of mappo.num_envs (1..num_envs; shares differ
    # by one at most), while this process keeps the batched policy (feudal_es.host_workers);
    # the batch is the same as with 0 = every copy stepped in this process
    host_workers: int = 0
    # settings left to the env's defaults (AUTO_SETTINGS the user did not give), filled
    # by observation kind when the run starts; auto=[] keeps every class default. Not
    # given: each setting not given to the constructor. Not in to_dict() or config.json
    auto: tuple[str, ...] = dataclasses.field(default=(), compare=False, repr=False)

    def __new__(cls, *args: Any, **kwargs: Any) -> TrainerConfig:
        # remember which fields the caller gave (auto not given: the others are open)
        self = super().__new__(cls)
        names = [f.name for f in dataclasses.fields(cls)][:len(args)]
        object.__setattr__(self, "_given", frozenset(names) | frozenset(kwargs))
        return self

    def __post_init__(self) -> None:
        c = type(self).__name__
        given = getattr(self, "_given", frozenset(f.name for f in dataclasses.fields(self)))
        if not isinstance(self.env, str):
            raise TypeError(f"{c}.env must be a string, got {self.env!r}")
        if not self.env.strip():
            raise ValueError(f"{c}.env must name an env (a registry id or 'module:attr'; see "
                             f"`feudal-es envs`), got {self.env!r}")
        if not isinstance(self.init_from, str):
            raise TypeError(f"{c}.init_from must be a path string, got {self.init_from!r}")
        if not isinstance(self.env_kwargs, Mapping):
            raise TypeError(f"{c}.env_kwargs must be a dict, got "
                            f"{type(self.env_kwargs).__name__}")
        try:
            mode(self.mode)
        except ValueError as e:
            raise ValueError(f"{c}.{e}") from None
        if self.backend not in BACKENDS:
            raise ValueError(f"{c}.backend must be one of {BACKENDS}, got {self.backend!r}")
        for name, low in (("n_outer", 1), ("grad_steps_per_outer", 1), ("episodes", 1),
                          ("num_skills", 1), ("checkpoint_every", 1),
                          ("keep_checkpoints", 1), ("plot_every", 1),
                          ("max_episode_steps", 1), ("population_devices", 0),
                          ("data_parallel", 0),
                          ("population_chunk", 0), ("ray_workers", 0), ("host_workers", 0),
                          ("selector_stage_rounds", 0)):
            check_int(f"{c}.{name}", getattr(self, name), low)
        check_number(f"{c}.episode_timeout", self.episode_timeout, low=0.0)
        for name in ("deterministic_eval", "gif", "pad_agents"):
            check_bool(f"{c}.{name}", getattr(self, name))
        imports = tuple(self.imports) if isinstance(self.imports, list) else self.imports
        if not isinstance(imports, tuple) or not all(isinstance(m, str) for m in imports):
            raise TypeError(f"{c}.imports must be a list of module names, got {imports!r}")
        object.__setattr__(self, "imports", imports)
        seeds = tuple(self.seeds) if isinstance(self.seeds, list) else self.seeds
        check_seed(f"{c}.seed", self.seed)
        if not isinstance(seeds, tuple):
            check_ints(f"{c}.seeds", seeds)  # the TypeError naming what it is
        object.__setattr__(self, "seeds", tuple(check_seed(f"{c}.seeds[{i}]", s)
                                                for i, s in enumerate(seeds)))
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"{c}.seeds must be distinct, got {list(self.seeds)}")
        nested = _move_settings(c, {name: getattr(self, name) for name in NESTED_CONFIGS})
        if "auto" not in given:
            auto = _open_settings({name: nested.get(name, getattr(self, name))
                                   for name in given})
        else:
            auto = tuple(self.auto) if isinstance(self.auto, list) else self.auto
            if not isinstance(auto, tuple) or any(p not in AUTO_SETTINGS for p in auto):
                raise ValueError(f"{c}.auto must list settings of {list(AUTO_SETTINGS)}, "
                                 f"got {self.auto!r}")
        object.__setattr__(self, "auto", auto)
        for name in NESTED_CONFIGS:
            object.__setattr__(self, name, _nested(c, name, nested[name]))
        if self.host_workers > self.mappo.num_envs:
            raise ValueError(f"{c}.host_workers={self.host_workers} is more than the "
                             f"{self.mappo.num_envs} env copies (mappo.num_envs) they share: "
                             "each worker steps at least one copy (0 = no workers)")
        if (self.actor.recurrent or self.critic.recurrent) \
                and self.mappo.sequences % self.mappo.minibatches:
            raise ValueError(f"{c}: a recurrent executor or critic (actor.recurrent, "
                             "critic.recurrent) trains on whole "
                             f"sequences: mappo.minibatches ({self.mappo.minibatches}) must "
                             f"divide the {self.mappo.sequences} sequences (mappo.num_envs "
                             "x num_steps / sequence_length)")
        check_settings(self)  # groups, team, others
        object.__setattr__(self, "env_kwargs", dict(self.env_kwargs))
        try:
            json.dumps(self.env_kwargs)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{c}.env_kwargs must be JSON-serialisable: {e}") from None

    # --- (de)serialisation ----------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (nested configs as dicts, tuples as lists); every
        setting, :attr:`auto` not (it is not a setting)."""
        data = dataclasses.asdict(self)
        del data["auto"]
        return json.loads(json.dumps(data))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainerConfig:
        """Build from a dict (e.g. ``config.json``); unknown keys are refused by name.
        Every setting is given (what the dict omits takes its class default, as a stored
        config needs), unless the dict lists ``auto``."""
        if not isinstance(data, Mapping):
            raise TypeError(f"a TrainerConfig must be a JSON object, got {type(data).__name__}")
        names = [f.name for f in dataclasses.fields(cls)]
        for k in data:
            if k not in names:
                close = difflib.get_close_matches(str(k), names, n=3)
                raise ValueError(f"TrainerConfig has no field {k!r}"
                                 + (f"; did you mean {close}?" if close else ""))
        return cls(**{"auto": (), **data})

    @classmethod
    def load(cls, path: str | os.PathLike) -> TrainerConfig:
        """Read a JSON config file (the user's own input, like a script); one that cannot
        be read is a ``ValueError`` naming the file and why. The settings of
        :data:`AUTO_SETTINGS` the file does not give are left open (:attr:`auto`)."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8-sig"))  # BOM or not
        except FileNotFoundError:
            raise ValueError(f"config file {path} does not exist") from None
        except IsADirectoryError:
            raise ValueError(f"config file {path} is a directory, not a JSON file") from None
        except OSError as e:
            raise ValueError(f"cannot read config file {path}: {e.strerror or e}") from None
        except UnicodeDecodeError as e:
            raise ValueError(f"config file {path} is not UTF-8 text (byte "
                             f"0x{e.object[e.start]:02x} at offset {e.start}); save it as "
                             "UTF-8 JSON") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"config file {path} is not valid JSON: {e}") from None
        if isinstance(data, Mapping) and "auto" not in data:
            data = {**data, "auto": _open_settings(data)}
        return cls.from_dict(data)

    @property
    def plan(self) -> Mode:
        """What :attr:`mode` does (:class:`feudal_es.modes.Mode`)."""
        return mode(self.mode)

    @property
    def trains_executor(self) -> bool:
        """Whether MAPPO trains the executor each round (:attr:`plan`)."""
        return self.plan.trains_executor

    @property
    def runs_es(self) -> bool:
        """Whether each round runs an ES generation (:attr:`plan`)."""
        return self.plan.runs_es

    @property
    def es_params(self) -> str:
        """What ES evolves (agents.ES_PARAMS): the selector, or the whole actor
        (:attr:`plan`)."""
        return self.plan.es_params

    @property
    def run_seeds(self) -> tuple[int, ...]:
        """The seeds this config trains: ``seeds``, or ``(seed,)``."""
        return self.seeds or (self.seed,)

    def for_seed(self, seed: int) -> TrainerConfig:
        """The one-seed config of ``seed`` (what each seed of a many-seed run trains)."""
        return dataclasses.replace(self, seed=seed, seeds=())

    def override(self, assignments: Mapping[str, Any]) -> TrainerConfig:
        """A copy with dotted-path assignments applied, e.g. ``{"es.sigma": 0.1,
        "env_kwargs.num_agents": 4, "n_outer": 3}``; an assigned setting is given (no
        longer in :attr:`auto`)."""
        data = self.to_dict()
        names = [*data, "auto"]
        given: dict[str, tuple[str, Any]] = {}
        for path, value in assignments.items():
            new = MOVED.get(path, path)
            if new in given and given[new][1] != value:
                raise ValueError(f"settings {given[new][0]}={given[new][1]!r} and "
                                 f"{path}={value!r} disagree (one is the older name of "
                                 "the other; give one)")
            given[new] = (path, value)
        for path, value in ((new, v) for new, (_, v) in given.items()):
            head, _, rest = path.partition(".")
            if head not in names:
                close = difflib.get_close_matches(head, names, n=3)
                raise ValueError(f"unknown setting {path!r}"
                                 + (f"; did you mean {close}?" if close else ""))
            if rest:
                if not isinstance(data.get(head), dict):
                    raise ValueError(f"setting {path!r}: {head} is not a nested config")
                data[head] = {**data[head], rest: value}
            else:
                data[head] = value
        if "auto" not in data:  # still open: what was open and is not assigned here
            values = {new: v for new, (_, v) in given.items()}
            data["auto"] = [p for p in self.auto if not _assigns(p, values)]
        return type(self).from_dict(data)


def parse_assignment(text: str) -> tuple[str, Any]:
    """``"es.sigma=0.1"`` -> ``("es.sigma", 0.1)``; the value is JSON if it parses as
    JSON (numbers, true/false, lists, objects), else the plain string."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise ValueError(f"--set expects KEY=VALUE, got {text!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value


def demo_config() -> TrainerConfig:
    """What ``feudal-es demo`` trains: MERL on a 4-robot Dispersion swarm, 20 rounds,
    :data:`COMPACT_ACTOR`, sized for about 1-2 minutes on 2 CPU cores."""
    return TrainerConfig(
        env="feudal_es/Dispersion-v0",
        env_kwargs=dict(num_agents=4, max_steps=40, map_size=8),
        mode="merl",
        n_outer=20,
        grad_steps_per_outer=4,
        episodes=4,
        es=ESConfig(pop_size=16, sigma=0.1, lr=0.05, optimizer="adam"),
        mappo=MAPPOConfig(num_envs=8, num_steps=40, epochs=4, minibatches=2,
                          lr=3e-3, critic_lr=3e-3, ent_coef=0.0),
        actor=dataclasses.replace(COMPACT_ACTOR, selector_period=8),
        critic=CriticConfig(hidden=(64, 64)),
        checkpoint_every=5,
    )
