rule train_head:
    """The DIVERSED weight head for one task (REINFORCE; resumable from its checkpoint) at the config's lambda; a
    task of lambda_sweep gets its head from sweep_lambda instead."""
    wildcard_constraints:
        task=one_of([t for t in PLAN.tasks if t not in PLAN.lambda_tasks]),
    input:
        unpack(inputs("train_head")),
    output:
        **PLAN.outputs("train_head"),
    params:
        **params("train_head"),
    threads: threads("train_head")
    resources:
        gpu=gpu("train_head"),
    log:
        "logs/train_head/{pair}/{task}.log",
    conda:
        "../../environment.yml"
    shell:
        "OMP_NUM_THREADS={threads} WANDB_MODE=${{WANDB_MODE:-offline}} HF_HUB_OFFLINE=1 "  # torch's threads; no network
        "diversed train head {params.pair} {params.config} {params.execution} --out {params.out} > {log} 2>&1"


use rule train_head as train_head_lambda with:
    wildcard_constraints:
        task=one_of(PLAN.lambda_tasks),
    input:
        unpack(inputs("train_head_lambda")),
    output:
        **PLAN.outputs("train_head_lambda"),
    params:
        **params("train_head_lambda"),
    threads: threads("train_head_lambda")
    resources:
        gpu=gpu("train_head_lambda"),
    log:
        "logs/train_head_lambda/{pair}/{task}/lambda{lam}.log",


rule distill_draft:
    """The fine-tuned-draft baseline: the draft fine-tuned on the task's training prompts (distill: toward the
    target's own text; sft: on the reference answers)."""
    input:
        unpack(inputs("distill_draft")),
    output:
        draft=directory(PLAN.outputs("distill_draft")["draft"]),
    params:
        **params("distill_draft"),
    threads: threads("distill_draft")
    resources:
        gpu=gpu("distill_draft"),
    log:
        "logs/distill_draft/{pair}/{task}.log",
    conda:
        "../../environment.yml"
    shell:
        "OMP_NUM_THREADS={threads} WANDB_MODE=${{WANDB_MODE:-offline}} HF_HUB_OFFLINE=1 "  # torch's threads; no network
        "diversed train draft {params.pair} {params.config} {params.execution} --out {output.draft} > {log} 2>&1"
