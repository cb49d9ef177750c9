"""Decoding speed, side by side on the same weights: transduce (as `translate` decodes by default,
`decode.precision=auto`, the batches shared by one process per thread; "transduce fp32" in
float32 throughout; dynamic int8; "1 process": `--workers 1`, one process whose threads share
each batch; "layers": each step through the decoder's modules, not `models/step_plan.py`),
Hugging Face `generate` and CTranslate2 (float32 and int8; "replicas": one translator per
thread, `inter_threads`) through `transduce export`, and optionally OpenNMT-py on its own model
of the same size.

    python benchmarks/speed_decode.py --model RUN --prepared DATA --out bench/speed-decode \
        [--onmt-model M.pt --onmt-bin VENV/bin] [--rounds 2] [--threads 2] [--batch-1-lines 200]
        [--engines "transduce,ctranslate2 int8"] [--batches 64 1]
    python benchmarks/speed_decode.py --model RUN --prepared DATA --out DIR --beam-memory

Beam 4, length penalty 0.6, at most source length + 50 tokens, on DATA's test set: batch 64 over
every line and batch 1 over the first `--batch-1-lines`. Engines run alternately, `--rounds`
times; the median time counts. Each engine's output is scored (lowercased tokenized BLEU), so a
fast engine that translates worse shows it. Each run of an engine is a process of its own
(`isolated`; before session 68 they shared one, to CTranslate2's cost). `--beam-memory`
measures peak memory of beam search against beam size instead, each size in a fresh process.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers

from transduce.config import DecodeConfig
from transduce.data.dataset import PreparedData
from transduce.decoding.translate import Translator, decode_ids
from transduce.export import export_ctranslate2, export_hf
from transduce.tasks.metrics import bleu

BEAM, ALPHA, EXTRA = 4, 0.6, 50

# An engine maps (source ids, batch size) to (output ids, seconds of decoding).


def timed(run):
    """An engine from a function that only decodes: its wall time is the decoding time."""

    def engine(sources: list[list[int]], batch: int) -> tuple[list[list[int]], float]:
        start = time.perf_counter()
        outputs = run(sources, batch)
        return outputs, time.perf_counter() - start

    return engine


def transduce_engine(model, vocab, int8: bool = False, precision: str = "auto", workers: int = 0):
    """What `transduce translate [--int8] [--precision P] [--workers W]` runs: one call, the
    weights packed (and quantized, or rounded to bfloat16 where `precision` takes that route)
    within it, the batches shared by `workers` processes (0: one per thread)."""

    @timed
    def run(sources: list[list[int]], batch: int) -> list[list[int]]:
        decode = DecodeConfig(beam_size=BEAM, alpha=ALPHA, max_len_b=EXTRA, batch_size=batch,
                              precision=precision, workers=workers)  # fmt: skip
        int8_weights = {} if int8 else None
        with torch.inference_mode():
            hyps = decode_ids(
                model, vocab, sources, decode, torch.device("cpu"), None, int8_weights
            )
        return [h[0].tokens for h in hyps]

    return run


def torch_ao_int8(model):
    """The route `--int8` took until session 18, for comparison: torch.ao's deprecated dynamic
    quantization of every nn.Linear (fbgemm), the tied output projection left in float32."""
    import copy

    from transduce.models.matmul import Linear

    plain = copy.deepcopy(model).eval()
    for parent in list(plain.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is Linear:  # quantize_dynamic matches nn.Linear by exact type
                linear = torch.nn.Linear(
                    child.in_features, child.out_features, child.bias is not None
                )
                linear.weight, linear.bias = child.weight, child.bias
                setattr(parent, name, linear.eval())
    return torch.ao.quantization.quantize_dynamic(plain, {torch.nn.Linear}, torch.qint8)


def hf_engine(folder: Path, pad: int, eos: int):
    import transformers

    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder).eval()

    @timed
    def run(sources: list[list[int]], batch: int) -> list[list[int]]:
        outputs = []
        for start in range(0, len(sources), batch):
            rows = [[*ids, eos] for ids in sources[start : start + batch]]
            width = max(map(len, rows))
            input_ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
            with torch.inference_mode():
                generated = model.generate(
                    input_ids=input_ids,
                    attention_mask=(input_ids != pad).long(),
                    num_beams=BEAM,
                    length_penalty=ALPHA,
                    early_stopping=True,
                    do_sample=False,
                    max_new_tokens=width - 1 + EXTRA,
                )
            outputs += [[t for t in row.tolist()[1:] if t not in (pad, eos)] for row in generated]
        return outputs

    return run


def ct2_engine(folder: Path, vocab, threads: int, replicas: int = 1):
    """CTranslate2, loaded for each run and released after it: a live Translator's worker
    threads slow every other engine in the process by 20-45% (measured: transduce 6.9 s ->
    8.2 s with one loaded, 9.9 s after it had translated, 6.5 s once it was deleted).
    `replicas`: its `inter_threads`, translators taking the batches in turn, each with
    `threads // replicas` threads of its own."""
    import ctranslate2

    def run(sources: list[list[int]], batch: int) -> tuple[list[list[int]], float]:
        translator = ctranslate2.Translator(
            str(folder), device="cpu", inter_threads=replicas, intra_threads=threads // replicas
        )
        pieces = [[*vocab.pieces(ids), "</s>"] for ids in sources]
        start = time.perf_counter()
        results = translator.translate_batch(
            pieces,
            beam_size=BEAM,
            length_penalty=ALPHA,
            max_batch_size=batch,
            max_decoding_length=max(map(len, pieces)) + EXTRA,
        )
        seconds = time.perf_counter() - start
        del translator
        return [vocab.piece_ids(r.hypotheses[0]) for r in results], seconds

    return run


def onmt_engine(model: Path, bin_dir: Path, out: Path, vocab, threads: int):
    """onmt_translate on piece text; the time is its own report, without loading the model."""

    def run(sources: list[list[int]], batch: int) -> tuple[list[list[int]], float]:
        src, hyp = out / f"onmt-{batch}.src", out / f"onmt-{batch}.hyp"
        src.write_text("\n".join(" ".join(vocab.pieces(ids)) for ids in sources) + "\n")
        command = [
            str(bin_dir / "onmt_translate"), "-model", str(model), "-src", str(src),
            "-output", str(hyp), "-beam_size", str(BEAM), "-batch_size", str(batch),
            "-batch_type", "sents", "-length_penalty", "wu", "-alpha", str(ALPHA),
            "-max_length", str(max(map(len, sources)) + EXTRA), "-report_time", "-gpu", "-1",
        ]  # fmt: skip
        env = {**peers.thread_env(threads), "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
        log = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
        seconds = float(
            re.search(r"Total translation time \(s\): ([\d.]+)", log.stderr + log.stdout)[1]
        )
        lines = hyp.read_text().splitlines()
        return [vocab.piece_ids(line.split()) for line in lines], seconds

    return run


def load_model(folder: Path):
    return Translator.load(folder, device="cpu").model


# The engines that read an export: its folder under OUT, the file that shows it done, and how.
_CT2 = ("ct2", "model.bin", export_ctranslate2, {})
_CT2_INT8 = ("ct2-int8", "model.bin", export_ctranslate2, {"quantize": "int8"})
EXPORTS = {
    "hf generate": ("hf", "config.json", export_hf, {}),
    "ctranslate2": _CT2,
    "ctranslate2 replicas": _CT2,  # one export for both ways of threading
    "ctranslate2 int8": _CT2_INT8,
    "ctranslate2 int8 replicas": _CT2_INT8,
}


def export_for(args, names: list[str]) -> None:
    """The exports engines `names` read, each made once and before anything is timed: made in
    an engine's own process, an export's progress bar would leave a thread there that keeps
    transduce's workers off (decoding/workers.py)."""
    for name in names:
        if name in EXPORTS:
            folder, done, export, options = EXPORTS[name]
            if not (args.out / folder / done).exists():
                export(args.model, args.out / folder, **options)


def chosen_engines(args, vocab) -> dict:
    """The builders of the engines `--engines` names (all by default), each called only in the
    engine's own process (`one_run`): torch's model is never loaded where CTranslate2 runs (once
    torch has run a product on two threads, CTranslate2 on two threads at batch 1 took 18.9-22.0
    s for what it did in 3.5-4.2 s alone: two OpenMP runtimes, session 68), and torch.ao's
    deprecated route is not paid for (nor its warnings printed) by a run that leaves it out.
    The exports they read: `export_for`."""
    folder = {name: args.out / EXPORTS[name][0] for name in EXPORTS}

    def transduce(layers: bool = False, **options):
        def build():
            model = load_model(args.model)
            # "layers": each step through the decoder's modules, as before session 70's plan
            model.written_out_steps = not layers
            return transduce_engine(model, vocab, **options)

        return build

    def ctranslate2(name: str, replicas: int = 1):
        return lambda: ct2_engine(folder[name], vocab, args.threads, replicas)

    builders = {
        "transduce": transduce(),
        "transduce int8": transduce(int8=True),
        "transduce fp32": transduce(precision="fp32"),
        "transduce 1 process": transduce(workers=1),
        "transduce layers": transduce(layers=True),
        "transduce layers 1 process": transduce(layers=True, workers=1),
        "transduce int8 1 process": transduce(int8=True, workers=1),
        "transduce int8 torch.ao": lambda: transduce_engine(
            torch_ao_int8(load_model(args.model)), vocab
        ),
        "hf generate": lambda: hf_engine(folder["hf generate"], vocab.pad, vocab.eos),
        "ctranslate2": ctranslate2("ctranslate2"),
        "ctranslate2 int8": ctranslate2("ctranslate2 int8"),
        # inter_threads: one translator per thread, as `transduce`'s workers (decoding/workers.py)
        "ctranslate2 replicas": ctranslate2("ctranslate2 replicas", replicas=args.threads),
        "ctranslate2 int8 replicas": ctranslate2("ctranslate2 int8 replicas", args.threads),
    }
    if args.onmt_model:
        builders["opennmt-py (own weights)"] = lambda: onmt_engine(
            args.onmt_model, args.onmt_bin, args.out, vocab, args.threads
        )
    # a subset, e.g. "transduce,transduce int8" (names hold no commas)
    chosen = args.engines.split(",") if args.engines else list(builders)
    unknown = [name for name in chosen if name not in builders]
    if unknown:
        raise SystemExit(f"unknown engines {unknown}; choose from {list(builders)}")
    return {name: builders[name] for name in chosen}


def _ct2_version() -> dict[str, str]:
    try:
        import ctranslate2
    except ImportError:
        return {}
    return {"ctranslate2": ctranslate2.__version__}


def speed(args) -> None:
    data = PreparedData.load(args.prepared)
    vocab = data.vocab
    test = data.split("test")
    sources = [test.pair(i)[0].tolist() for i in range(len(test))]
    text = data.text("test").tgt
    references = [text[i] for i in test.index]  # the lines that were kept, in order
    names = list(chosen_engines(args, vocab))  # each run a process of its own (`isolated`)
    export_for(args, names)
    cases = {64: sources, 1: sources[: args.batch_1_lines]}
    cases = {batch: cases[batch] for batch in args.batches}
    results = []
    for batch, lines in cases.items():
        times: dict[str, list[float]] = {name: [] for name in names}
        outputs: dict[str, list[list[int]]] = {}
        for _ in range(args.rounds):
            for name in names:
                outputs[name], seconds = isolated(args, name, batch)
                times[name].append(seconds)
                print(f"{name}, batch {batch}: {seconds:.2f} s", flush=True)
        for name in names:
            seconds = statistics.median(times[name])
            hypotheses = vocab.decode(outputs[name])
            results.append({
                "engine": name,
                "batch": batch,
                "sentences": len(lines),
                "seconds": round(seconds, 3),
                "seconds_per_round": [round(t, 3) for t in times[name]],
                "sentences_per_s": len(lines) / seconds,
                "generated_tokens_per_s": sum(len(o) + 1 for o in outputs[name]) / seconds,
                "bleu_lc_tok": bleu(
                    hypotheses, references[: len(lines)], lowercase_tokenized=True
                ).score,
            })  # fmt: skip
    summary = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "model": str(args.model),
        "threads": args.threads,
        "rounds": args.rounds,
        "machine": {"cpu": peers.cpu_identity(), "torch": torch.__version__, **_ct2_version()},
        "rows": results,
    }
    (args.out / "results.json").write_text(json.dumps(summary, indent=2))
    print("| batch | engine | sentences/s | generated tokens/s | x transduce | BLEU (lc tok) |")
    print("|---|---|---|---|---|---|")
    for r in results:
        ours = [x for x in results if x["batch"] == r["batch"] and x["engine"] == "transduce"]
        ratio = f"{r['sentences_per_s'] / ours[0]['sentences_per_s']:.2f}" if ours else "-"
        print(
            f"| {r['batch']} | {r['engine']} | {r['sentences_per_s']:.1f} | "
            f"{r['generated_tokens_per_s']:,.0f} | {ratio} "
            f"| {r['bleu_lc_tok']:.2f} |"
        )


def isolated(args, name: str, batch: int) -> tuple[list[list[int]], float]:
    """One run of engine `name` in a fresh process: engines in one process slow each other (a
    live CTranslate2 translator's threads slowed transduce by 20-45%; after torch had run a
    product on two threads, CTranslate2 at batch 1 took 18.9-22.0 s for 3.5-4.2 s alone, session
    68), and a process with other Python threads (an export's progress bar) decodes without
    workers."""
    command = [sys.executable, __file__, "--model", str(args.model), "--prepared",
               str(args.prepared), "--out", str(args.out), "--threads", str(args.threads),
               "--batch-1-lines", str(args.batch_1_lines), "--engines", name, "--one-run",
               str(batch)]  # fmt: skip
    if args.onmt_model:
        command += ["--onmt-model", str(args.onmt_model), "--onmt-bin", str(args.onmt_bin)]
    subprocess.run(command, check=True, env=peers.thread_env(args.threads))
    run = json.loads((args.out / "one-run.json").read_text())
    return run["outputs"], run["seconds"]


def one_run(args) -> None:
    """The child of `isolated`: the one engine named, once, into OUT/one-run.json."""
    data = PreparedData.load(args.prepared)
    test = data.split("test")
    lines = len(test) if args.one_run == 64 else args.batch_1_lines
    sources = [test.pair(i)[0].tolist() for i in range(min(lines, len(test)))]
    torch.set_num_threads(args.threads)
    (build,) = chosen_engines(args, data.vocab).values()
    engine = build()
    outputs, seconds = engine(sources, args.one_run)
    (args.out / "one-run.json").write_text(json.dumps({"outputs": outputs, "seconds": seconds}))


BEAM_MEMORY_PROBE = r"""
import ctypes, json, sys, torch
from transduce.config import DecodeConfig
from transduce.data.dataset import PreparedData
from transduce.decoding.translate import Translator, decode_ids

def kib(field):
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(field))

model, prepared, beam, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
allocator = sys.argv[5]
torch.set_num_threads(threads)
data = PreparedData.load(prepared)
test = data.split("test")
sources = [test.pair(i)[0].tolist() for i in range(len(test))]
translator = Translator.load(model, device="cpu")  # keeps freed memory (runtime.py)
if allocator == "returning":  # glibc's defaults back: freed blocks over 128 KiB go back at once,
    libc = ctypes.CDLL("libc.so.6")  # so the peak is that of the live tensors
    libc.mallopt(-3, 128 * 1024), libc.mallopt(-1, 128 * 1024)  # M_MMAP_, M_TRIM_THRESHOLD
    libc.malloc_trim(0)
before = kib("VmRSS:")
open("/proc/self/clear_refs", "w").write("5")  # resets VmHWM to the current RSS
with torch.inference_mode():
    decode = DecodeConfig(beam_size=beam, batch_size=64)
    decode_ids(translator.model, data.vocab, sources, decode, translator.device)
peak = (kib("VmHWM:") - before) / 1024
print(json.dumps({"beam": beam, "allocator": allocator, "peak_above_loaded_mib": peak}))
"""


def beam_memory(args) -> None:
    """Peak resident memory of beam search over the test set at batch 64, per beam size, with
    the allocator as transduce runs it (freed memory kept) and as glibc's defaults return it."""
    rows = []
    for allocator in ("keeping", "returning"):
        for beam in (1, 2, 4, 8, 16):
            output = subprocess.run(
                [sys.executable, "-c", BEAM_MEMORY_PROBE, str(args.model), str(args.prepared),
                 str(beam), str(args.threads), allocator],
                capture_output=True, text=True, check=True, env=peers.thread_env(args.threads),
            ).stdout  # fmt: skip
            rows.append(json.loads(output.strip().splitlines()[-1]))
            print(rows[-1], flush=True)
    (args.out / "beam-memory.json").write_text(json.dumps(rows, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="a transduce run folder")
    parser.add_argument("--prepared", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--onmt-model", type=Path)
    parser.add_argument("--onmt-bin", type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-1-lines", type=int, default=200)
    parser.add_argument("--engines", help="comma-separated engine names (default: all)")
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 1], choices=[64, 1])
    parser.add_argument("--beam-memory", action="store_true")
    parser.add_argument("--one-run", type=int, help=argparse.SUPPRESS)  # `isolated`'s child
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.one_run:
        one_run(args)
    else:
        beam_memory(args) if args.beam_memory else speed(args)


if __name__ == "__main__":
    main()
