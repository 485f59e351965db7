"""Frozen, validated configurations of the actor and the critic.

Every field is documented where it is declared; ``__post_init__`` checks each one and
raises a ``TypeError``/``ValueError`` that names the offending field.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from envs.validate import check_bool, check_int, check_ints, check_number

ACTIVATIONS = ("relu", "tanh")  # what ActorConfig.activation may name
OPTION_MODES = ("learned", "uniform", "fixed", "schedule")  # what ActorConfig.options may name
SELECTOR_INPUTS = ("embedding", "own", "both")  # what ActorConfig.selector_input may name


@dataclasses.dataclass(frozen=True)
class ActorConfig:
    """Sizes of the feudal actor (LPAC backbone, selector heads, executor head).

    The defaults are the small sizes used for training on the bundled envs (8 agents,
    16x16x3 maps); :meth:`lpac` gives the sizes of the LPAC paper.
    """

    # --- perception (per agent, before any communication) ---
    cnn_channels: tuple[int, ...] = (32, 32, 32)  # conv output channels, one per layer
    cnn_strides: tuple[int, ...] = (1, 2, 2)  # stride of each conv layer (same length)
    cnn_kernel: int = 3  # square kernel size; padding keeps "same" size at stride 1
    cnn_out: int = 32  # CNN feature size (linear layer after the flattened conv maps)
    vec_hidden: tuple[int, ...] = (64,)  # hidden sizes of the MLP on vector observations
    vec_out: int = 32  # vector-MLP feature size
    # --- communication (K-hop graph filter over the comm graph) ---
    gnn_hops: int = 3  # K: each layer mixes A^0 X ... A^K X
    gnn_layers: int = 2  # number of stacked graph-filter layers
    gnn_features: int = 128  # output features of every graph-filter layer
    # --- embedding MLP -> per-agent h ---
    embed_hidden: tuple[int, ...] = (128,)  # hidden sizes of the MLP after the graph filter
    embed_dim: int = 64  # size of the per-agent embedding h read by every head
    # --- selector (ES parameters; keep them small) ---
    selector_hidden: tuple[int, ...] = ()  # () = linear selector h -> K logits
    # what the selector reads: "embedding" (h, the executor's embedding, which MAPPO
    # reshapes every round), "own" (the env's ``envs.base.SELECTOR_OBS`` entry alone, an
    # input no gradient moves) or "both" (their concatenation); "own"/"both" need an env
    # whose observation has that entry
    selector_input: str = "embedding"
    # how options are chosen at decision steps: "learned" (the SkillSelector's argmax),
    # "uniform" (uniformly at random: MAPPO-only's random-selector ablation) or "fixed"
    # (always option ``fixed_option``: the single-option ablation) or "schedule" (the
    # options of ``option_schedule``, one per decision, the same for every agent: e.g. an
    # imitated executor's "explore, then cover", no selector read)
    options: str = "learned"
    fixed_option: int = 0  # options="fixed": the option every agent always holds
    # options="schedule": the option every agent takes at the d-th decision
    # (t // selector_period == d); the last one is held to the episode's end
    option_schedule: tuple[int, ...] = ()
    # the feudal time scale: env steps between the selector's decisions (it decides at
    # t = 0 of every episode and whenever t % selector_period == 0; the option is held in
    # between). It belongs to the actor: MAPPO's collection, ES fitness episodes, the
    # host path and evaluation all read it from the actor they run
    selector_period: int = 10
    # options that end when done: an agent whose option's goal is met (the env's
    # ``skill_done(state)[i, option_i]``, e.g. "go to POI k" once POI k is observed) has
    # the selector re-decide at that step instead of holding the option to the next
    # multiple of ``selector_period`` (which stays the longest an option is held). Needs
    # an env with ``skill_done``; False is the fixed period alone
    option_ends: bool = False
    goal_dim: int = 0  # sub-goal size of the GoalSelector; 0 = no GoalSelector
    # --- executor head (gradient parameters) ---
    skill_embed_dim: int = 0  # 0 = condition on the skill one-hot; >0 = learned embedding
    executor_hidden: tuple[int, ...] = (128, 128)  # hidden sizes of the executor MLP
    log_std_init: float = -0.5  # initial state-independent log-std (canonical [-1,1] units)
    # a recurrent executor: a GRU of ``gru_hidden`` units between the executor's input
    # (embedding, option code, sub-goal) and its action MLP. Its state is carried with the
    # options through every rollout and reset at each episode's first step; MAPPO
    # trains it on sequences (whole, or mappo.sequence_length pieces). The selector and
    # the backbone stay feed-forward
    recurrent: bool = False
    gru_hidden: int = 64  # GRU units of a recurrent executor
    # hidden activation of the vector encoder and the embedding MLP ("relu" | "tanh"; the
    # CNN stays ReLU). "tanh" with vec_hidden=(), vec_out=64, gnn_layers=0,
    # embed_hidden=(), embed_dim=64, executor_hidden=() is the 64-64 tanh MLP of the
    # JaxMARL / purejaxrl PPO baselines
    activation: str = "relu"
    squash: bool = False  # Box actions: False = clip a Gaussian sample, True = tanh-squash

    def __post_init__(self) -> None:
        c = type(self).__name__
        check_ints(f"{c}.cnn_channels", self.cnn_channels, 1, allow_empty=False)
        check_ints(f"{c}.cnn_strides", self.cnn_strides, 1, allow_empty=False)
        if len(self.cnn_strides) != len(self.cnn_channels):
            raise ValueError(
                f"{c}.cnn_strides must have one entry per conv layer "
                f"({len(self.cnn_channels)}), got {len(self.cnn_strides)}"
            )
        check_int(f"{c}.cnn_kernel", self.cnn_kernel, 1)
        check_int(f"{c}.cnn_out", self.cnn_out, 1)
        check_ints(f"{c}.vec_hidden", self.vec_hidden, 1, allow_empty=True)
        check_int(f"{c}.vec_out", self.vec_out, 1)
        check_int(f"{c}.gnn_hops", self.gnn_hops, 0)
        check_int(f"{c}.gnn_layers", self.gnn_layers, 0)
        check_int(f"{c}.gnn_features", self.gnn_features, 1)
        check_ints(f"{c}.embed_hidden", self.embed_hidden, 1, allow_empty=True)
        check_int(f"{c}.embed_dim", self.embed_dim, 1)
        check_ints(f"{c}.selector_hidden", self.selector_hidden, 1, allow_empty=True)
        check_int(f"{c}.goal_dim", self.goal_dim, 0)
        check_int(f"{c}.skill_embed_dim", self.skill_embed_dim, 0)
        check_ints(f"{c}.executor_hidden", self.executor_hidden, 1, allow_empty=True)
        check_number(f"{c}.log_std_init", self.log_std_init)
        check_bool(f"{c}.recurrent", self.recurrent)
        check_int(f"{c}.gru_hidden", self.gru_hidden, 1)
        check_bool(f"{c}.squash", self.squash)
        if self.selector_input not in SELECTOR_INPUTS:
            raise ValueError(f"{c}.selector_input must be one of {SELECTOR_INPUTS}, got "
                             f"{self.selector_input!r}")
        if self.options not in OPTION_MODES:
            raise ValueError(f"{c}.options must be one of {OPTION_MODES}, got {self.options!r}")
        check_int(f"{c}.fixed_option", self.fixed_option, 0)
        check_ints(f"{c}.option_schedule", self.option_schedule, 0, allow_empty=True)
        if (self.options == "schedule") != bool(self.option_schedule):
            raise ValueError(f"{c}.option_schedule is the options of options='schedule' (and "
                             f"only of it): got options={self.options!r}, option_schedule="
                             f"{self.option_schedule!r}")
        check_int(f"{c}.selector_period", self.selector_period, 1)
        check_bool(f"{c}.option_ends", self.option_ends)
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"{c}.activation must be one of {ACTIVATIONS}, got "
                             f"{self.activation!r}")

    @classmethod
    def lpac(cls, **overrides: Any) -> ActorConfig:
        """Sizes of the LPAC paper: 3 conv layers of 32 channels (kernel 3, no striding)
        to a 32-d feature, 5 graph-filter layers of 256 features with K = 3 hops."""
        sizes: dict[str, Any] = dict(
            cnn_channels=(32, 32, 32),
            cnn_strides=(1, 1, 1),
            cnn_out=32,
            gnn_hops=3,
            gnn_layers=5,
            gnn_features=256,
            embed_hidden=(256,),
            embed_dim=64,
        )
        sizes.update(overrides)
        return cls(**sizes)


@dataclasses.dataclass(frozen=True)
class CriticConfig:
    """Sizes of the centralized critic MLP(global state, agent one-hot, skill one-hot).

    ``time_input`` appends the elapsed fraction of the episode, ``t / max_steps``, to the
    critic's state: on a fixed-horizon task the value depends on the steps left, which
    neither the observations nor most global states show (Pardo et al. 2018, "Time Limits
    in Reinforcement Learning"). It is the critic's input only (centralized training); the
    actor is unchanged. It needs the env's horizon, so only the JAX path has it.

    ``recurrent`` gives the critic a memory: a GRU over the critic's state (one per env
    copy, the critic being centralized) whose output replaces the state in the value
    MLP's input, for tasks where the global state at one step does not tell the value
    (the counterpart of ``ActorConfig.recurrent``, as MAPPO-RNN's critic)."""

    hidden: tuple[int, ...] = (256, 256)  # hidden sizes of the value MLP
    layer_norm: bool = True  # LayerNorm after each hidden linear layer (before the tanh)
    time_input: bool = False  # the critic also sees t / max_steps
    # a recurrent critic: a GRU of ``gru_hidden`` units reads the critic's state (global
    # state, and t / max_steps with time_input) each step and the value MLP reads its
    # output with the agent and skill one-hots. One state per env copy, carried through
    # every MAPPO collection (both paths) and zeroed at each episode's first step; MAPPO
    # re-runs it over sequences (whole, or mappo.sequence_length pieces), as for a
    # recurrent executor
    recurrent: bool = False
    gru_hidden: int = 64  # GRU units of a recurrent critic

    def __post_init__(self) -> None:
        c = type(self).__name__
        check_ints(f"{c}.hidden", self.hidden, 1, allow_empty=False)
        check_bool(f"{c}.layer_norm", self.layer_norm)
        check_bool(f"{c}.time_input", self.time_input)
        check_bool(f"{c}.recurrent", self.recurrent)
        check_int(f"{c}.gru_hidden", self.gru_hidden, 1)
