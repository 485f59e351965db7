"""The imitation recipe (:class:`PretrainConfig`): what and how long
:func:`feudal_es.pretrain.imitate` imitates, as a frozen, validated dataclass that a
``configs/*_pretrain.json`` file holds, and the optimizers it trains with."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import optax

from envs.validate import check_bool, check_int, check_ints, check_number
from feudal_es.imitation_loss import IMITATION_LOSSES

__all__ = ["FINAL_DECAY", "LR_SCHEDULES", "PretrainConfig"]

LR_SCHEDULES = ("constant", "cosine")
#: the final fit's last learning rate, a share of ``PretrainConfig.lr``
FINAL_DECAY = 0.01


@dataclasses.dataclass(frozen=True)
class PretrainConfig:
    """What and how long to imitate (frozen, validated; errors name the field)."""

    expert: str = "reference"  # a policy of envs.gif.POLICIES for the env ("reference": its first)
    option: int = 0  # the option the executor holds while imitating (Coverage: 1 = "cover")
    episodes: int = 32  # episodes collected per data round
    rounds: int = 3  # data rounds: behaviour cloning, then rounds - 1 DAgger rounds
    steps_per_round: int = 300  # gradient steps after each data round
    batch_size: int = 256  # swarm samples per gradient step
    lr: float = 1e-3
    beta_decay: float = 0.5  # DAgger: P(expert acts) in round r is beta_decay ** r
    seed: int = 0
    val_episodes: int = 8  # held-out episodes per data round (validation loss, not trained on)
    evals_per_round: int = 10  # validation losses measured per round (the curve's points)
    patience: int = 0  # measurements without a better validation loss that end a round (0: never)
    lr_schedule: str = "constant"  # or "cosine": from lr to lr / 10 over all gradient steps
    weight_decay: float = 0.0  # AdamW's decoupled weight decay (0: Adam)
    # fit the action the env executes (clipped to its bounds) instead of the action before
    # the clip: where the mean overshoots a bound its gradient is zero and the coordinate
    # stays stuck (the recipes swept before 2026-12-04 ran with it)
    clip_loss: bool = False
    # "mse" (LPAC's) or "direction": speed and heading fit apart, so that a heading the
    # robot cannot pin down does not shrink its speed (feudal_es.imitation_loss)
    loss: str = "mse"
    # the feudal split: each option's expert (a policy name of envs.gif.POLICIES, in the
    # env's option order; "" for an option no one demonstrates) and the options every agent
    # holds at successive decisions, the actor's selector_period apart (the last to the
    # end). Both empty: ``expert`` demonstrates the one option ``option`` held throughout
    experts: tuple[str, ...] = ()
    schedule: tuple[int, ...] = ()
    # after the last round: gradient steps on all the data the rounds gathered, from a
    # fresh optimizer whose rate decays (cosine) from lr to lr * FINAL_DECAY, ending with
    # the actor of the best validation loss (no early stop); 0: none. A multiple of chunk
    final_steps: int = 0
    # DAgger's last step (Ross et al. 2011: return the best of the rounds' policies on
    # validation): after each round (and the final fit) the actor plays this many episodes
    # of its own (keys from ``seed``, the same every round, never trained on) and imitate
    # returns the one of the highest mean team return; 0: the last round's (or the final
    # fit's). The rounds go on from the last round's actor either way
    select_episodes: int = 0
    # the env's symmetries (Coverage: the square's 8, envs.coverage_symmetry): each
    # training sample's state is moved by a random one, then observed and labelled by the
    # expert anew, so every gathered state stands for its rotations and mirror images (the
    # validation samples are as gathered)
    augment: bool = False

    def __post_init__(self) -> None:
        c = type(self).__name__
        for name in ("experts", "schedule"):  # a recipe file's JSON lists
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        if not isinstance(self.experts, tuple) or not all(
                isinstance(e, str) for e in self.experts):
            raise TypeError(f"{c}.experts must be a list of policy names, got "
                            f"{self.experts!r}")
        check_ints(f"{c}.schedule", self.schedule, 0, allow_empty=True)
        if bool(self.experts) != bool(self.schedule):
            raise ValueError(f"{c}.experts and {c}.schedule go together (one expert per "
                             f"option, the options held in turn): got experts="
                             f"{list(self.experts)}, schedule={list(self.schedule)}")
        for o in self.schedule:
            if o >= len(self.experts) or not self.experts[o]:
                raise ValueError(f"{c}.schedule holds option {o}, which {c}.experts "
                                 f"{list(self.experts)} gives no expert")
        for name, low in (("option", 0), ("episodes", 1), ("rounds", 1),
                          ("steps_per_round", 1), ("batch_size", 1), ("seed", 0),
                          ("val_episodes", 1), ("evals_per_round", 1), ("patience", 0),
                          ("final_steps", 0), ("select_episodes", 0)):
            check_int(f"{c}.{name}", getattr(self, name), low)
        if self.final_steps % self.chunk:
            raise ValueError(f"{c}.final_steps={self.final_steps} must be a multiple of the "
                             f"{self.chunk} gradient steps between two validation losses "
                             f"(steps_per_round={self.steps_per_round} over "
                             f"evals_per_round={self.evals_per_round})")
        check_number(f"{c}.lr", self.lr, low=0.0, low_open=True)
        check_number(f"{c}.beta_decay", self.beta_decay, low=0.0, high=1.0)
        check_number(f"{c}.weight_decay", self.weight_decay, low=0.0)
        check_bool(f"{c}.clip_loss", self.clip_loss)
        check_bool(f"{c}.augment", self.augment)
        if self.loss not in IMITATION_LOSSES:
            raise ValueError(f"{c}.loss must be one of {IMITATION_LOSSES}, got {self.loss!r}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"{c}.lr_schedule must be one of {LR_SCHEDULES}, got "
                             f"{self.lr_schedule!r}")

    @classmethod
    def load(cls, path: str | Path) -> PretrainConfig:
        """A recipe file: a JSON object of this class's fields (``configs/*_pretrain.json``);
        one that cannot be read, or names a field this class lacks, is a ``ValueError``
        naming the file."""
        import json

        try:
            data = json.loads(Path(path).read_text(encoding="utf-8-sig"))
        except FileNotFoundError:
            raise ValueError(f"recipe file {path} does not exist") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"recipe file {path} cannot be read as JSON: {e}") from None
        if not isinstance(data, dict):
            raise ValueError(f"recipe file {path} must hold a JSON object of PretrainConfig "
                             f"fields, got {type(data).__name__}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - fields)
        if unknown:
            raise ValueError(f"recipe file {path}: PretrainConfig has no field(s) {unknown} "
                             f"(fields: {', '.join(sorted(fields))})")
        try:
            return cls(**data)
        except (TypeError, ValueError) as e:
            raise ValueError(f"recipe file {path}: {e}") from None

    @property
    def chunk(self) -> int:
        """Gradient steps between two validation losses: ``steps_per_round`` over the
        largest divisor of it that is at most ``evals_per_round`` (one compiled chunk)."""
        k = max(d for d in range(1, min(self.evals_per_round, self.steps_per_round) + 1)
                if self.steps_per_round % d == 0)
        return self.steps_per_round // k

    def optimizer(self) -> optax.GradientTransformation:
        """Adam (AdamW with ``weight_decay``) at ``lr``, cosine-decayed to ``lr / 10`` over
        every gradient step of the ``rounds`` when ``lr_schedule="cosine"``."""
        lr = (optax.cosine_decay_schedule(self.lr, self.rounds * self.steps_per_round, 0.1)
              if self.lr_schedule == "cosine" else self.lr)
        return self._adam(lr)

    def final_optimizer(self) -> optax.GradientTransformation:
        """The final fit's: Adam (AdamW with ``weight_decay``) from ``lr`` cosine-decayed to
        ``lr * FINAL_DECAY`` over ``final_steps`` (a low rate at the end settles the fit
        that each round's constant rate leaves noisy)."""
        return self._adam(optax.cosine_decay_schedule(self.lr, self.final_steps,
                                                      FINAL_DECAY))

    def _adam(self, lr: float | optax.Schedule) -> optax.GradientTransformation:
        return optax.adamw(lr, weight_decay=self.weight_decay) if self.weight_decay \
            else optax.adam(lr)
