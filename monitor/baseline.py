"""The dense baseline: what a user would get by fine-tuning the whole trunk, domain after
domain, in the order the experts arrived (``trainer.recipes.dense``), measured exactly like ours.

Row 0 is the trunk alone; row ``i`` is the model after fine-tuning on the ``i``-th domain,
evaluated on every domain's held-out set with the same scoring as the mixture
(:func:`monitor.scoring.score_texts`). The fine-tuned model after the latest step is kept
on disk (safetensors, atomically replaced), so a restarted monitor continues from it.
Unlike the expert run, earlier rows cannot be back-filled (the dense model of an earlier
step is gone by construction), so a domain whose held-out set appears later has missing
(``None``) entries in the baseline's earlier rows.

Its cost per step is the fine-tune (``baseline_steps`` optimizer steps, whatever the number
of domains) plus one forward, no backward, over every domain's held-out set: every weight
changed, so no loss measured before holds and, unlike ours, nothing can be skipped. That
is D domains x ``heldout_per_domain`` documents x ``max_tokens`` tokens, linear in D per
step; each row's ``cpu_s`` says what the step cost."""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from monitor.heldout import HeldoutSets
from monitor.history import MatrixHistory, perplexity
from monitor.records import EvalRow
from monitor.scoring import score_texts
from worx.atomic import atomic_write_json, fsync_dir

if TYPE_CHECKING:
    from trainer.recipes.dense import DenseConfig

log = logging.getLogger(__name__)

RUN = "dense_baseline"


class DenseBaseline:
    """Sequential dense fine-tuning of the trunk in ``trunk_dir``, one domain per step.

    Parameters
    ----------
    trunk_dir
        The trunk's Hugging Face directory (the baseline trains a copy of it).
    state_dir
        Where the latest fine-tuned model and the list of steps done are kept.
    config
        ``trainer.recipes.dense.DenseConfig`` (steps per domain, learning rate...).
    """

    def __init__(
        self,
        trunk_dir: str | Path,
        heldout: HeldoutSets,
        history: MatrixHistory,
        state_dir: str | Path,
        config: DenseConfig | None = None,
        max_tokens: int = 128,
        batch_size: int = 8,
    ) -> None:
        from trainer.recipes.dense import DenseConfig

        self.trunk_dir = Path(trunk_dir)
        self.heldout = heldout
        self.history = history
        self.state_dir = Path(state_dir)
        self.config = config or DenseConfig(progress=False)
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self._model: Any = None
        self._tokenizer: Any = None

    @property
    def _checkpoint(self) -> Path:
        return self.state_dir / "dense-latest"

    def _checkpoint_step(self) -> dict[str, Any]:
        """``{"step", "expert_id"}`` the saved model stands for ({} if none)."""
        marker = self._checkpoint / "worx-step.json"
        return json.loads(marker.read_text()) if marker.exists() else {}

    def _load(self) -> None:
        if self._model is not None:
            return
        from experts.trunk import use_fused_gelu
        from trainer.recipes.dense import load_trainable

        done = len(self.history.rows(RUN))
        saved = self._checkpoint_step()
        source = self._checkpoint if saved else self.trunk_dir
        if done > 1 and not saved:
            log.warning(
                "dense baseline: %d rows done but no saved model in %s; continuing from the "
                "trunk (the baseline's later rows are not comparable)",
                done,
                self._checkpoint,
            )
        self._model, self._tokenizer = load_trainable(source)
        use_fused_gelu(self._model)  # the same function, faster: the demo waits on this baseline
        self._model.eval()
        log.info("dense baseline loaded from %s (%d rows done)", source, done)

    def _save(self, step: int, expert_id: str) -> None:
        """Replace the saved model atomically (write aside, then rename), with its step."""
        tmp = self.state_dir / ".dense-tmp"
        old = self.state_dir / ".dense-old"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
        self._model.save_pretrained(str(tmp), safe_serialization=True)
        self._tokenizer.save_pretrained(str(tmp))
        atomic_write_json(tmp / "worx-step.json", {"step": step, "expert_id": expert_id})
        if self._checkpoint.exists():
            self._checkpoint.rename(old)
        tmp.rename(self._checkpoint)
        fsync_dir(self.state_dir)
        shutil.rmtree(old, ignore_errors=True)

    def _evaluate(
        self,
        step: int,
        expert_ids: list[str],
        arrived: str | None,
        domain: str | None,
        cpu_started: float | None = None,
    ) -> EvalRow:
        """Every domain's held-out set under the current model (it changed at this step:
        nothing measured before holds). ``cpu_started``: process_time() when the step began
        (the fine-tune included in the row's ``cpu_s``)."""
        from trainer.recipes.dense import sequence_losses

        cpu_started = time.process_time() if cpu_started is None else cpu_started
        docs = 0

        model = self._model

        def token_losses(ids: Any, mask: Any, weights: Any) -> Any:
            return sequence_losses(model, ids, mask)

        loss: dict[str, float] = {}
        sizes: dict[str, int] = {}
        for d in self.heldout.domains():
            texts = [doc.text for doc in self.heldout.docs(d)]
            scores = score_texts(
                token_losses,
                self._tokenizer,
                texts,
                None,
                self.max_tokens,
                self.batch_size,
                device=next(model.parameters()).device,
            )
            loss[d] = scores.mean
            sizes[d] = len(texts)
            docs += len(texts)
        row = EvalRow(
            run=RUN,
            step=step,
            expert_ids=expert_ids,
            loss=loss,
            perplexity={d: perplexity(v) for d, v in loss.items()},
            created_ms=int(time.time() * 1000),
            arrived_expert=arrived,
            arrived_domain=domain,
            heldout_size=sizes,
            cpu_s=round(time.process_time() - cpu_started, 4),
            docs_scored=docs,
        )
        self.history.append(row)
        return row

    def step(self, expert_id: str, domain_id: str, train_texts: Sequence[str]) -> list[EvalRow]:
        """Fine-tune on one more domain (the one ``expert_id`` was trained for) and evaluate.

        A replay (``expert_id`` already a baseline step) trains nothing and returns that
        step's rows again (0 to its own), as :meth:`Evaluator.on_registration` does.
        """
        from trainer.recipes.dense import dense_finetune

        rows = self.history.rows(RUN)
        steps = [r.step for r in rows if r.arrived_expert == expert_id]
        if steps:
            return rows[: steps[0] + 1]
        if not train_texts:
            raise ValueError(
                f"no training texts for {domain_id!r}: the baseline cannot take this step"
            )
        cpu_started = time.process_time()
        self._load()
        out: list[EvalRow] = []
        if not rows:
            out.append(self._evaluate(0, [], None, None))
            rows = self.history.rows(RUN)
            cpu_started = time.process_time()
        step = len(rows)
        saved = self._checkpoint_step()
        if saved.get("step") == step and saved.get("expert_id") == expert_id:
            # crashed after saving this step's model, before its row: evaluate, do not retrain
            log.info("dense baseline step %d was trained before a restart; evaluating it", step)
            result = None
        else:
            self._model.train()
            result = dense_finetune(self._model, self._tokenizer, list(train_texts), self.config)
            self._model.eval()
            self._save(step, expert_id)
        out.append(
            self._evaluate(
                len(rows), rows[-1].expert_ids + [expert_id], expert_id, domain_id, cpu_started
            )
        )
        if result is not None:
            log.info(
                "dense baseline step %d (%s): %d tokens in %.1f s",
                step,
                domain_id,
                result.tokens,
                result.elapsed_s,
            )
        return out
