rule decode:
    """One decoding run: (pair, task, method, T, K, seed) on the task's eval split."""
    input:
        method_inputs,
    output:
        manifest="results/runs/{pair}/{task}/{method}/T{T}-K{K}-s{seed}/manifest.json",
        generations="results/runs/{pair}/{task}/{method}/T{T}-K{K}-s{seed}/generations.jsonl",
    params:
        args=method_args,
        method=lambda wc: wc.method.partition("@")[0],
        data=lambda wc: f"--data-files {TASKS[wc.task]['data_files']}" if TASKS[wc.task]["data_files"] else "",
        n=lambda wc: TASKS[wc.task]["n_eval"],
        max_new=lambda wc: TASKS[wc.task]["max_new_tokens"],
        experiment=EXPERIMENT,
    resources:
        gpu=lambda wc: gpu(wc.pair),
    log:
        "logs/decode/{pair}/{task}/{method}/T{T}-K{K}-s{seed}.log",
    conda:
        "../../environment.yml"
    shell:
        "diversed generate {params.args} --task {wildcards.task} {params.data} -n {params.n} "
        "--max-new-tokens {params.max_new} --temperature {wildcards.T} -K {wildcards.K} --seed {wildcards.seed} "
        "--run-dir $(dirname {output.manifest}) --label pair={wildcards.pair} --label task={wildcards.task} "
        "--label method={params.method} --label experiment={params.experiment} > {log} 2>&1"


rule score:
    """Quality of one run through lm-eval, replaying its stored generations (CPU; no decoding)."""
    input:
        "results/runs/{pair}/{task}/{method}/T{T}-K{K}-s{seed}/manifest.json",
    output:
        "results/runs/{pair}/{task}/{method}/T{T}-K{K}-s{seed}/scores.json",
    log:
        "logs/score/{pair}/{task}/{method}/T{T}-K{K}-s{seed}.log",
    conda:
        "../../environment.yml"
    shell:
        "diversed score $(dirname {input}) > {log} 2>&1"
