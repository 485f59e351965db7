"""The imitation's record beside the pretrained actor: its validation curve (CSV, and a PNG
where matplotlib is installed) and the progress bar ``feudal-es pretrain`` shows."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from feudal_es import checkpoint

if TYPE_CHECKING:
    from feudal_es.pretrain_config import PretrainConfig

__all__ = ["ImitationProgress", "beside", "curve_paths", "write_curve"]


def curve_paths(path: str | Path) -> tuple[Path, Path]:
    """Where :func:`feudal_es.pretrain.pretrain` writes the validation curve of the actor
    at ``path``: ``NAME.curve.csv`` and ``NAME.curve.png`` beside ``NAME.safetensors``."""
    return beside(path, "curve.csv"), beside(path, "curve.png")


def beside(path: str | Path, ending: str) -> Path:
    """``NAME.<ending>`` beside the actor file ``NAME.safetensors`` at ``path`` (the
    imitation's files that go with it: its curve, its rounds)."""
    path = Path(path)
    stem = path.name[:-len(checkpoint.SUFFIX)] if path.name.endswith(checkpoint.SUFFIX) \
        else path.stem
    return path.with_name(f"{stem}.{ending}")


def write_curve(path: str | Path, curve: list[dict[str, float]], title: str
                ) -> list[Path]:
    """The validation curve as CSV (round, step, train_loss, val_loss) and, where
    matplotlib is installed, a PNG, each written atomically; returns what was written."""
    from feudal_es.atomic import atomic_write, atomic_write_text

    csv_path, png_path = curve_paths(path)
    rows = ["round,step,train_loss,val_loss"] + [
        f"{int(p['round'])},{int(p['step'])},{p['train_loss']:.6g},{p['val_loss']:.6g}"
        for p in curve]
    written = [atomic_write_text(csv_path, "\n".join(rows) + "\n")]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return written
    fig, ax = plt.subplots(figsize=(6, 3.5))
    steps = [p["step"] for p in curve]
    ax.plot(steps, [p["train_loss"] for p in curve], label="training (mean of the chunk)")
    ax.plot(steps, [p["val_loss"] for p in curve], label="validation (held-out episodes)")
    for r in sorted({int(p["round"]) for p in curve})[1:]:  # DAgger rounds begin
        ax.axvline(min(p["step"] for p in curve if p["round"] == r), color="0.8", lw=0.8)
    ax.set(xlabel="gradient step (grey: a DAgger round's new data)", ylabel="imitation "
           "loss (MSE of the action)", yscale="log", title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    atomic_write(png_path, lambda f: fig.savefig(f, format="png", dpi=100))
    plt.close(fig)
    return [*written, png_path]


class ImitationProgress:
    """A tqdm bar over every gradient step of the imitation, with the round, the samples
    collected and the last training / validation loss; ETA from tqdm."""

    def __init__(self, cfg: PretrainConfig, enabled: bool):
        self.bar = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=cfg.rounds * cfg.steps_per_round + cfg.final_steps,
                            unit="step", dynamic_ncols=True, desc="imitation")
        self.cfg = cfg

    def __call__(self, point: dict[str, float]) -> None:
        if self.bar is None:
            return
        if "resumed" in point:  # the rounds before were done by an earlier run
            self.bar.n = self.bar.initial = int(point["resumed"])  # (the ETA counts from it)
            self.bar.refresh()
            return
        if "collected" in point:  # a round begins (an early-stopped one's rest is skipped)
            r = int(point["round"])
            self.bar.set_description(f"round {r + 1}/{self.cfg.rounds}" if r < self.cfg.rounds
                                     else "final fit")
            self.bar.update(r * self.cfg.steps_per_round - self.bar.n)
            return
        self.bar.set_postfix(loss=f"{point['train_loss']:.4g}",
                             val=f"{point['val_loss']:.4g}", refresh=False)
        self.bar.update(self.cfg.chunk)

    def finish(self) -> None:
        """The imitation is done: the steps early stopping skipped are counted as done."""
        if self.bar is not None:
            self.bar.set_description("done")
            self.bar.update(self.bar.total - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
