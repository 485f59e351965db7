"""``MAPPOConfig``: the hyper-parameters of CTDE-MAPPO, frozen and validated."""

from __future__ import annotations

import dataclasses

from envs.validate import check_bool, check_int, check_number

__all__ = ["REWARDS", "UPDATE_MODES", "MAPPOConfig"]

UPDATE_MODES = ("auto", "fused", "split")
REWARDS = ("option", "local", "team", "mixed")


@dataclasses.dataclass(frozen=True)
class MAPPOConfig:
    """Hyper-parameters of CTDE-MAPPO (frozen, validated; errors name the field)."""

    lr: float = 5e-4  # Adam step size of the executor (actor minus selector)
    critic_lr: float = 5e-4  # Adam step size of the centralized critic
    gamma: float = 0.99  # discount
    gae_lambda: float = 0.95  # GAE lambda
    clip_eps: float = 0.2  # PPO ratio clip
    value_clip_eps: float = 0.2  # value clipping around the old value; 0 disables
    huber_delta: float = 10.0  # Huber loss delta of the value loss; 0 = squared error
    epochs: int = 5  # passes over each batch
    minibatches: int = 2  # minibatches per epoch (split over the T*E swarm samples)
    ent_coef: float = 0.01  # entropy bonus
    vf_coef: float = 1.0  # value-loss weight
    max_grad_norm: float = 10.0  # global-norm clip, actor and critic separately
    num_envs: int = 8  # E: parallel env copies
    num_steps: int = 32  # T: steps collected per env and train step
    value_norm: bool = True  # normalize value targets with running statistics
    norm_advantages: bool = True  # standardize advantages over the batch
    anneal_lr: bool = False  # linear lr decay to 0 over ``anneal_updates`` train steps
    anneal_updates: int = 1000  # horizon of the lr annealing
    # "fused": the epochs x minibatches loop as one lax.scan inside the train step's one
    # jit; "split": a Python loop over jitted pieces (XLA:CPU runs a large convolution's
    # gradient inside a loop body much slower than in straight-line code); "auto": split
    # when the actor's CNN is large (see uses_fused_update), fused otherwise
    update: str = "auto"
    # during collection, each agent's option at a decision step is a uniformly random one
    # with this probability (else the selector's), so the executor practises every option
    # in every kind of state and ES candidates that choose differently meet a competent
    # executor; evaluation and fitness episodes never explore
    option_exploration: float = 0.2
    # what each agent is paid per step (REWARDS): "option", the dense reward channel of the
    # option it holds (the feudal executor's); "local", the env's own dense per-agent
    # reward; "team", the team reward (sparse: the mission signal) given to every agent;
    # "mixed", local + team (the MERL paper's "mixed" reward of its gradient baselines)
    reward: str = "option"
    # the training sequences of a recurrent executor or critic (ActorConfig.recurrent,
    # CriticConfig.recurrent): each env copy's num_steps collected steps cut into pieces
    # of this many, each re-run from the GRU states the collection had at its start (the
    # MAPPO paper's data_chunk_length); 0 = whole (one sequence per env copy). Must divide
    # num_steps; minibatches split the num_envs * num_steps / sequence_length sequences.
    # Ignored when both are feed-forward
    sequence_length: int = 0
    # L2-SP anchor (Li, Grandvalet & Davoine 2018): the loss adds anchor_coef / 2 times the
    # squared distance of the executor's leaves from where the run started them (a
    # pretrained executor with TrainerConfig.init_from), a trust region that keeps
    # fine-tuning near the imitation however long it runs; 0 = none (no anchor is stored)
    anchor_coef: float = 0.0

    def __post_init__(self) -> None:
        c = type(self).__name__
        for name in ("lr", "critic_lr", "clip_eps", "max_grad_norm"):
            check_number(f"{c}.{name}", getattr(self, name), low=0.0, low_open=True)
        for name in ("gamma", "gae_lambda", "option_exploration"):
            check_number(f"{c}.{name}", getattr(self, name), low=0.0, high=1.0)
        for name in ("value_clip_eps", "huber_delta", "ent_coef", "vf_coef", "anchor_coef"):
            check_number(f"{c}.{name}", getattr(self, name), low=0.0)
        for name in ("epochs", "minibatches", "num_envs", "num_steps", "anneal_updates"):
            check_int(f"{c}.{name}", getattr(self, name), 1)
        check_int(f"{c}.sequence_length", self.sequence_length, 0)
        if self.sequence_length and self.num_steps % self.sequence_length:
            raise ValueError(f"{c}.sequence_length ({self.sequence_length}) must divide "
                             f"num_steps ({self.num_steps})")
        for name in ("value_norm", "norm_advantages", "anneal_lr"):
            check_bool(f"{c}.{name}", getattr(self, name))
        if self.reward not in REWARDS:
            raise ValueError(f"{c}.reward must be one of {REWARDS}, got {self.reward!r}")
        if self.update not in UPDATE_MODES:
            raise ValueError(f"{c}.update must be one of {UPDATE_MODES}, got {self.update!r}")
        if (self.num_steps * self.num_envs) % self.minibatches:
            raise ValueError(
                f"{c}.minibatches ({self.minibatches}) must divide num_steps * num_envs "
                f"({self.num_steps} * {self.num_envs})"
            )

    @property
    def sequences(self) -> int:
        """Training sequences per train step of a recurrent executor or critic (see
        ``sequence_length``)."""
        return self.num_envs * (self.num_steps // (self.sequence_length or self.num_steps))

    @property
    def batch_size(self) -> int:
        """Swarm samples per train step: ``num_steps * num_envs``."""
        return self.num_steps * self.num_envs

