"""The end of a run: the final evaluation (the last validation, then the ``final_split``'s loss
and, for translation, its beam-search BLEU/chrF), its lines, ``eval.json`` and the figures; or,
stopped by a signal, where its checkpoint is."""

from __future__ import annotations

import json
import os
from typing import Any

import jax

from deepnet_jax.runs import plots
from deepnet_jax.runs.workdir import RunDir
from deepnet_jax.training import data as train_data
from deepnet_jax.training import diagnostics
from deepnet_jax.training.actions import EvalContext, Validator
from deepnet_jax.training.progress import Progress, say, scored_set


def stopped(run: EvalContext, signal_name: str | None, step: int) -> dict[str, Any]:
    """End a run stopped by a signal: wait for the checkpoint of ``step`` micro-batches to be
    written, say where it is, and return ``{"stopped": True, ...}``."""
    c = run.config
    cause = signal_name or "a signal to another process"
    updates = step // c.grad_accum_steps
    line = f"stopped by {cause} after update {updates}/{c.total_steps}; "
    if run.checkpointer:
        run.checkpointer.close()  # the asynchronous saves are complete on disk
        line += f"checkpoint {run.checkpointer.run_dir.checkpoint(step)} saved; "
        line += "run the same command again to resume"
    else:
        reason = "no workdir" if not run.workdir else "checkpoint_every=0"
        line += f"nothing saved ({reason})"
    if run.writer:
        run.writer.close()
    say(line)
    return {"stopped": True, "message": line, "step": step, "steps": updates}


def final_evaluation(
    run: EvalContext, validator: Validator, params: Any, progress: Progress
) -> dict[str, Any]:
    """The last validation, then the ``final_split`` (loss; beam-search BLEU/chrF and samples
    for translation): the run's results, as ``eval.json`` holds them, each figure with the
    size of its set (``*_loss_examples`` behind loss, perplexity, accuracy and source
    sensitivity; ``*_sentences`` / ``*_unseen_sentences`` behind BLEU and chrF)."""
    c = run.config
    result = validator(params, c.total_steps)
    out: dict[str, Any] = {
        "eval_loss": result["loss"],
        "eval_perplexity": result["perplexity"],
        "eval_accuracy": result["accuracy"],
        "first_train_loss": progress.first_loss,
        "train_loss": progress.last_record.get("loss"),
        "steps": c.total_steps,
    }
    for name in ("source_sensitivity", "loss_examples", "loss_truncated", "loss_dropped"):
        if name in result:
            out[f"eval_{name}"] = result[name]
    if validator.with_bleu:
        out["eval_bleu_greedy"] = result["bleu"]
        out["eval_bleu_sentences"] = result["bleu_sentences"]
        out["eval_distinct_hypotheses"] = result["distinct_hypotheses"]
        out["eval_unseen_sentences"] = result["unseen_sentences"]
        if "unseen_bleu" in result:
            out["eval_unseen_bleu_greedy"] = result["unseen_bleu"]
    if isinstance(run.data, train_data.CorpusData) and c.final_split:
        out.update(_final_split(run, validator, params))
    return out


def _final_split(run: EvalContext, validator: Validator, params: Any) -> dict[str, Any]:
    """``<split>_*`` results of ``final_split``, with the lines that report them (the loss
    line, then for translation the BLEU line), each naming the set behind its figures."""
    c = run.config
    split, beam = c.final_split, c.decode.beam_size
    final = validator.loss(params, split)
    out = {f"{split}_{name}": v for name, v in final.items()}
    line = f"{split}: loss {final['loss']:.3f}, perplexity {final['perplexity']:.2f}"
    if validator.ctx.translates:
        line += f", source sensitivity {final['source_sensitivity']:.2f} nats"
    say(f"{line} on {scored_set(final, validator.ctx.translates, c.data.max_len)}")
    if validator.ctx.translates:
        scores = validator.translation_scores(params, split, beam, 0)
        out.update({f"{split}_{name}": v for name, v in scores.items()})
        if run.writer:
            names = ("bleu", "chrf", "sentences", "unseen_bleu", "unseen_chrf", "unseen_sentences")
            record = {k: scores[k] for k in names if k in scores}
            run.writer.write(split, c.total_steps, record)
        say(f"{split}: {_bleu_sets(scores, beam, c.data.max_len)}")
    return out


def _bleu_sets(scores: dict[str, Any], beam: int, max_len: int) -> str:
    """The BLEU/chrF part of the final line, each figure with its set: all sentences (sources
    cut to ``max_len − 1`` pieces counted) and those whose source is unseen in training."""
    text = f"beam {beam} on all {scores['sentences']:,} sentences"
    cut = scores["truncated_sources"]
    if cut:
        text += f" ({cut:,} source{'s' if cut > 1 else ''} cut to {max_len - 1} pieces)"
    text += (
        f": BLEU {scores['bleu']:.2f}, chrF {scores['chrf']:.2f}, "
        f"{scores['distinct_hypotheses']:.0%} distinct hypotheses"
    )
    if scores["unseen_sentences"] == scores["sentences"]:
        text += "; no source occurs in the training split"
    elif "unseen_bleu" in scores:
        text += (
            f"; on the {scores['unseen_sentences']:,} whose source is not in the training "
            f"split: BLEU {scores['unseen_bleu']:.2f}, chrF {scores['unseen_chrf']:.2f}"
        )
    else:
        text += "; every source occurs in the training split"
    return text + f" ({scores['bleu_signature']})"


def finish(run: EvalContext, results: dict[str, Any]) -> None:
    """Close the checkpoints, print the results and write ``eval.json`` and the figures."""
    c = run.config
    if run.checkpointer:
        run.checkpointer.close()
    if not run.workdir:  # the numbers; the strings (signatures, samples) were printed above
        say(json.dumps({k: v for k, v in results.items() if isinstance(v, (int, float))}))
    if not run.workdir or jax.process_index() != 0:
        return
    run_dir = RunDir(run.workdir)
    os.makedirs(run_dir.root, exist_ok=True)
    with open(run_dir.eval_results, "w") as f:
        json.dump(results, f, indent=1)
    say(f"results: {run_dir.eval_results}")
    if run.writer:
        run.writer.close()
        say(f"curves: {plots.plot_curves(run_dir)}")
        if c.diagnostics.every and c.diagnostics.plot:
            say(f"diagnostics: {', '.join(diagnostics.plot(run_dir))}")
