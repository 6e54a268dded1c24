"""Catalogue of the reproduced silent bugs (rendered into samples/BUGS.md).

Each entry: id (the `# BUG(<id>)` tag in parallel.py and the `bug` argument of
its make_* function), the finding kinds a checker should report, a title, what
the mistake is, and the public report it mirrors (None: a generic mistake).
"""

BUGS = {
    "missing-allreduce": dict(
        kinds=["missing-all-reduce"],
        title="Missing all-reduce after a row-parallel linear",
        what="layers.1 attention: the output projection `o @ wo` (row-parallel, "
             "wo sharded on its input dimension) is added to the residual stream "
             "without the psum over tp, so each rank adds only its partial sum.",
        ref="Generic Megatron tensor-parallel mistake (RowParallelLinear with "
            "reduce_results=False and no later reduction)."),
    "scan-missing-allreduce": dict(
        kinds=["missing-all-reduce"],
        title="Missing all-reduce inside a scanned layer body",
        what="Layers under jax.lax.scan (stacked weights, one HLO while loop): the "
             "attention output projection `o @ wo` in the loop body is added to the "
             "carried residual stream without the psum over tp, so every iteration "
             "(every layer) adds only its rank's partial sum.",
        ref="Generic Megatron tensor-parallel mistake, in a scanned model (the "
            "missing-allreduce bug repeated by the loop)."),
    "embed-missing-allreduce": dict(
        kinds=["missing-all-reduce"],
        title="Vocab-parallel embedding without its all-reduce",
        what="Each rank looks up only the token ids of its vocabulary slice (others "
             "are zeroed); the psum that completes VocabParallelEmbedding is missing.",
        ref="Megatron-LM VocabParallelEmbedding (reduce_from_tensor_model_parallel_region)."),
    "duplicated-allreduce": dict(
        kinds=["wrong-reduction"],
        title="Duplicated all-reduce",
        what="layers.0 MLP: the row-parallel down projection is all-reduced twice; the "
             "second psum sums tp identical copies (result x tp).",
        ref="Generic (an all-reduce inside a RowParallelLinear plus another at the call site)."),
    "pmean-allreduce": dict(
        kinds=["wrong-reduction", "constant-mismatch"],
        title="Mean instead of sum in the row-parallel all-reduce",
        what="Every MLP down projection is reduced with pmean (sum / tp) instead of psum, "
             "as if it were a data-parallel gradient average.",
        ref="Generic."),
    "attn-scale-per-shard": dict(
        kinds=["constant-mismatch"],
        title="Attention scaled by a per-shard instead of the global size",
        what="The softmax scale is computed from the local q projection width "
             "(wq_local.shape[1] // n_heads = head_dim / tp) instead of head_dim.",
        ref="Generic (shape-derived constants read from sharded tensors)."),
    "sbh-as-bsh": dict(
        kinds=["layout-mismatch"],
        title="Attention output reshaped as BSH while the data is SBH",
        what="The attention context is produced sequence-major [S, B, heads, hd]; it is "
             "reshaped straight to [B, S, hidden] instead of being transposed first.",
        ref="transformers-neuronx commit 69d039d (attention output layout SBH vs BSH)."),
    "wrong-mesh-axis": dict(
        kinds=["wrong-collective-group"],
        title="All-reduce over the wrong mesh axis",
        what="On a dp=2 x tp=4 mesh, the attention output projection is reduced over "
             "dp instead of tp (replica groups {0,4},{1,5},... instead of {0,1,2,3},{4,5,6,7}).",
        ref="Generic (process group mix-up between data- and tensor-parallel groups)."),
    "wrong-replica-groups": dict(
        kinds=["wrong-collective-group"],
        title="Wrong replica-group list",
        what="The tensor-parallel all-reduce of the attention output uses groups "
             "{0,1},{2,3},{4,5},{6,7}: pairs inside each tp group instead of the whole "
             "group of 4 (exported on a dp x tpa x tpb view of the same devices).",
        ref="Generic (hand-built replica groups)."),
    "allgather-wrong-dim": dict(
        kinds=["wrong-shard-dim"],
        title="All-gather along the wrong dimension",
        what="Sequence parallelism: the sequence-sharded activations [B, S/tp, H] are "
             "all-gathered along the batch dimension and reshaped to [B, S, H] "
             "(code written for the sequence-first [S, B, H] layout).",
        ref="Generic (Megatron's SP gathers dim 0 because its activations are [S, B, H])."),
    "reducescatter-no-allgather": dict(
        kinds=["wrong-shard-dim"],
        title="Reduce-scatter with no matching all-gather",
        what="Sequence parallelism: the final layer's reduce-scatter leaves the residual "
             "stream sharded on the sequence and the all-gather before the LM head is "
             "missing, so the logits stay sharded on the sequence (and on the vocabulary).",
        ref="Generic (gather_from_sequence_parallel_region forgotten at the model output)."),
    "ulysses-batch1-only": dict(
        kinds=["layout-mismatch"],
        title="Ulysses all-to-all correct only for batch size 1",
        what="Before the sequence-to-heads all-to-all the batch is flattened into the "
             "sequence ([B*S/sp, heads, hd]); after the exchange the rows are "
             "(source rank, batch, seq) but are reshaped as (batch, source rank, seq).",
        ref="DeepSpeed issue #5808 (sequence parallel alltoall with batch size > 1), fixed by PR #5823."),
    "fp16-allreduce": dict(
        kinds=["dtype-mismatch"],
        title="fp16 all-reduce in a bf16 model",
        what="Row-parallel partial sums of a bf16 model are cast to float16 for the "
             "all-reduce and back: overflow above 65504 and a different rounding.",
        ref="DeepSpeed issue #2071 (communication in fp16 for a bf16 model)."),
    "qnorm-sharded-dim": dict(
        kinds=["missing-all-reduce"],
        title="q-layernorm computed over a sharded dimension",
        what="The q RMSNorm normalises over all heads (n_heads*head_dim); under tensor "
             "parallelism each rank holds only its heads and computes the mean square "
             "over its local width without reducing it over tp.",
        ref="Megatron-LM issue #1620 (placement / computation of q_layernorm)."),
    "kv-cache-offset": dict(
        kinds=["wrong-shard-dim"],
        title="KV cache sliced at the wrong offset",
        what="Decode step: each rank slices the kv heads it owns out of the replicated "
             "cache at rank * (q heads per rank) instead of rank * (kv heads per rank) "
             "(GQA: 2 q heads per kv head), reading another rank's (or clamped) cache.",
        ref="transformers-neuronx commit e2f5241 (KV cache slicing offset)."),
    "fused-qkv-layout": dict(
        kinds=["layout-mismatch"],
        title="GPT-2 fused QKV weight split in the wrong layout",
        what="GPT-2's c_attn [H, 3H] is laid out (q | k | v); each rank should take the "
             "columns of its heads from each third. The variant takes one contiguous "
             "block of 3H/tp columns and splits it into q, k, v (a per-rank "
             "(q_r | k_r | v_r) layout that the checkpoint does not have).",
        ref="transformers-neuronx commit 0c646b0 (GPT-2 weight layout change)."),
    "posemb-unreduced": dict(
        kinds=["missing-all-reduce"],
        title="Positional-embedding branch not reduced across tp ranks",
        what="GPT-2: token and position embeddings are both vocabulary(position)-parallel "
             "lookups; only the token branch is all-reduced, the position branch is "
             "added as a per-rank partial.",
        ref="Megatron-LM issue #1699 (position embedding not reduced under tensor parallelism)."),
    "expert-order": dict(
        kinds=["layout-mismatch"],
        title="Expert-parallel all-to-all with experts in the wrong order",
        what="Dispatch rows are arranged for round-robin expert placement (expert j*ep + r on "
             "rank r; with one expert per rank, in reverse) while the expert weights are blocked "
             "(rank r owns experts r*E/ep ...), so tokens are processed by the wrong experts.",
        ref="Generic expert-parallel mistake (local vs global expert index mapping)."),
    "router-unsynced": dict(
        kinds=["missing-all-reduce"],
        title="MoE router weights not synchronised across tensor-parallel ranks",
        what="Sequence parallelism + MoE: each tp rank sees only its sequence shard, so "
             "the router weight gradient is a partial sum; the update skips the psum "
             "over tp and the replicated router weights diverge across ranks.",
        ref="Megatron-LM issue #599 (SwitchMLP router weights not synchronised within "
            "the tensor-parallel group), fix PR #619."),
    "rope-no-offset": dict(
        kinds=["constant-mismatch"],
        title="RoPE positions of a sequence shard not offset by the rank",
        what="Ulysses with RoPE applied before the all-to-all: each rank holds tokens "
             "[r*S/sp, (r+1)*S/sp) but builds its rotary tables from positions 0..S/sp-1 "
             "(the offset rank*S/sp computed from partition-id is missing).",
        ref="Generic sequence-parallel mistake (position ids of a sequence shard)."),
    "bias-before-allreduce": dict(
        kinds=["wrong-reduction"],
        title="Row-parallel bias added before the all-reduce",
        what="GPT-2 attention c_proj: the replicated bias is added to each rank's partial "
             "product before the psum, so it is counted tp times.",
        ref="Generic (Megatron RowParallelLinear adds its bias after the reduction for this reason)."),
}

# The head of samples/BUGS.md (export.py fills in the counts n_bugs and n_var).
INTRO = """# Reproduced silent bugs

Generated by samples/gen/run.sh from samples/gen/bugs.py and the manifest; do not edit.

{n_bugs} bugs in {n_var} variants. Each variant is a correct hand-written
per-device program (shard_map) with one realistic mistake, selected by the `bug`
argument of its `make_*` function in samples/gen/parallel.py; the mistake is on the
line tagged `# BUG(<id>)`. `max |diff|` is the largest absolute difference between
the baseline and the variant run by JAX on the seeded inputs of samples/<config>/*.io.stf
(full-size variants are lowered from shapes only and not run). The correct pairs agree
to ~1e-6 (f32) or 0.03 (bf16 rounding). Where the mistake is a missing operation, the line is the one whose operation the variant skips. The transformers-neuronx commits and Megatron-LM #1699 are cited as the task described them (their diffs were not consulted offline): those variants reproduce the described class of mistake in this JAX code, not the original code.
"""
