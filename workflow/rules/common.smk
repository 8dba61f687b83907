# Config validation and the run table; no rules here.
import itertools

from snakemake.utils import validate


validate(config, schema="../schemas/config.schema.yaml", set_default=True)

EXPERIMENT = config["experiment"]
PAIRS = config["pairs"]
TASKS = config["tasks"]
METHODS = config["methods"]
SWEEP = config["sweep"]
# Command-line options as strings in a fixed order: params compare equal whatever the config's key order.
HEAD_ARGS = " ".join(f"--{k.replace('_', '-')} {config['train_head'][k]}" for k in
                     ("epochs", "batch_size", "lr", "acceptance_weight", "rollout", "temperature", "mixing", "reward"))
DISTILL_ARGS = f"--epochs {config['distill']['epochs']} --lr {config['distill']['lr']}"


def pair_models(pair):
    """(target, draft) as the diversed CLI takes them."""
    p = PAIRS[pair]
    return p["target"], p["draft"]


def models_marker(pair):
    """The prepare-models output a pair needs (none for hub models, loaded on first use)."""
    return [f"resources/models/{pair}.json"] if PAIRS[pair]["prepare"] != "none" else []


def pair_args(pair):
    p = PAIRS[pair]
    return (f"--target {p['target']} --draft {p['draft']} --draft-layers {p['draft_layers']} "
            f"--dtype {p['dtype']} --device {p['device']}")


def gpu(pair):
    return 1 if PAIRS[pair]["device"].startswith("cuda") else 0


def train_args(wc):
    t = TASKS[wc.task]
    data = f"--data-files {t['data_files']}" if t["data_files"] else ""
    return f"{pair_args(wc.pair)} --task {wc.task} {data} --n-train {t['n_train']} --seed 0"


def method_inputs(wc):
    """What a decoding run needs besides the models: a fine-tuned draft, a chosen w, or a trained head."""
    inputs = models_marker(wc.pair)
    if wc.method == "finetuned":
        inputs.append(f"resources/drafts/{wc.pair}/{wc.task}")
    elif wc.method == "fixed":
        inputs.append(f"results/sweeps/{wc.pair}/{wc.task}/T{wc.T}-K{wc.K}/choice.json")
    elif wc.method.startswith("dynamic"):
        head_task = wc.method.partition("@")[2] or wc.task
        inputs.append(f"results/heads/{wc.pair}/{head_task}/head.safetensors")
    return inputs


def method_args(wc, input):
    target, draft = pair_models(wc.pair)
    p = PAIRS[wc.pair]
    common = f"--dtype {p['dtype']} --device {p['device']} --draft-layers {p['draft_layers']} --target {target}"
    if wc.method == "finetuned":
        return f"{common} --draft {input[-1]} --verifier strict"
    common += f" --draft {draft}"
    if wc.method == "fixed":
        return f"{common} --verifier fixed --weight-file {input[-1]}"
    if wc.method.startswith("dynamic"):
        head_task = wc.method.partition("@")[2]
        label = f" --label head_task={head_task}" if head_task else ""
        return f"{common} --verifier dynamic --head {input[-1]}{label}"
    return f"{common} --verifier {wc.method}"


def run_dir(pair, task, method, T, K, seed):
    return f"results/runs/{pair}/{task}/{method}/T{T}-K{K}-s{seed}"


def decode_runs():
    """The run table: (pair, task, method, T, K, seed), plus the cross-task transfer runs (method dynamic@X)."""
    runs = [(pair, task, method, T, K, seed)
            for pair, task, method, T, K, seed in itertools.product(PAIRS, TASKS, METHODS, config["temperatures"],
                                                                    config["K"], config["seeds"])]
    for pair, t, K, seed in itertools.product(PAIRS, config["transfer"], config["K"], config["seeds"]):
        runs.append((pair, t["eval"], f"dynamic@{t['head']}", config["transfer_temperature"], K, seed))
    return runs


def sweep_dirs():
    """Static sweeps: the fixed-w choice per (pair, task, T) at each K, and the K-figure sweeps at T = 1."""
    dirs = {f"results/sweeps/{pair}/{task}/T{T}-K{K}"
            for pair, task, T, K in itertools.product(PAIRS, TASKS, config["temperatures"], config["K"])
            if "fixed" in METHODS}
    dirs |= {f"results/sweeps/{pair}/{task}/T{SWEEP['figure_temperature']}-K{K}"
             for pair, task, K in itertools.product(PAIRS, SWEEP["figure_tasks"], SWEEP["figure_K"])}
    return sorted(dirs)


TABLES = [f"results/tables/{name}.{ext}" for name in ("table1", "table2", "table3", "speed")
          for ext in ("csv", "md", "tex")] + [f"results/tables/{n}.csv" for n in ("runs", "sweeps", "weights")]
FIGURES = [f"figures/{stem}.{ext}" for stem in
           ["acceptance_vs_weight", "weight_distribution"]
           + [f"{kind}_T{T:g}" for kind in ("quality_vs_time", "acceptance_by_position") for T in config["temperatures"]]
           for ext in ("png", "pdf")]


def final_outputs():
    return TABLES + FIGURES + ["results/REPORT.md"]
