"""samples/fresh56: a 56th batch of programs as a user writes them, on the theme of integer and bitwise computation under sharding (multiplicative and xor-shift hashes of token ids, bit packing and popcount, integer histograms, int8 x int8 -> int32 matmuls with per-channel scales, modular arithmetic, saturating counters, per-device random keys), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. hashed embeddings (dp2 x tp4): token ids hashed twice in uint32 (a
    Knuth multiplicative hash, top 6 bits, and a xorshift32 mod 64), the
    64-row table's rows over tp; each rank looks up the buckets in its row
    range (masking the others) and the sum of the two rows is psum'd over
    tp. Bugs: bucket without the rank's row offset, the multiplicative hash
    in int32 (arithmetic shift, negative buckets), psum over dp.
 2. a Bloom filter (128 bits = 4 uint32 words, 3 hashes) built from tokens
    over sp8: local bits packed into words by shifts, all_gather'd and
    OR-reduced by an unrolled functools.reduce. Bugs: XOR-reduce, psum of
    the words (overlapping bits carry), the local words only.
 3. Bloom filter membership with the 8 words over tp4 (2 words per rank):
    queries replicated, each rank tests the hash bits that fall in its
    words (others count as set), AND across ranks as a pmin. Bugs: pmax,
    word index without the rank's offset.
 4. attention-mask bit packing (dp2 x sp4): bool masks packed into uint8
    little-endian by hand (shift and sum) against jnp.packbits in the
    baseline, valid-token counts by lax.population_count psum'd over sp.
    Bugs: counts psum'd over dp, counts not reduced.
 5. a token histogram by integer-division buckets (dp4 x tp2): ids // 10
    counted into 32 bins, the bins over tp (one_hot of bucket - offset),
    the batch over dp, psum over dp; baseline jnp.bincount. Bugs: no bin
    offset, psum over tp, pmax over dp.
 6. int8 x int8 -> int32 row-parallel matmul (tp4) by lax.dot_general with
    preferred_element_type=int32, int32 psum, per-row activation scales and
    per-column weight scales after. Bugs: no psum, scaled then pmean'd,
    int8 accumulation (wraps).
 7. int8 column-parallel matmul with per-output-channel weight scales
    passed replicated and dynamic_slice'd at the rank's offset, then a
    requantisation to int8 with a global output scale (dp2 x tp4). Bugs:
    scales sliced at offset 0, offset from the dp index.
 8. dynamic per-token int8 activation quantisation with the hidden dim over
    tp4: per-token absmax pmax'd, round, int8 matmul against int8 weights,
    int32 psum, dequantise. Bugs: local absmax, absmax psum'd.
 9. dropout with per-device keys on a dp4 x tp2 mesh: the key's data passed
    as uint32[2], wrap_key_data, fold_in of the dp index then of the tp
    index; the baseline folds in every block's coordinates and
    concatenates. Bugs: tp index not folded in, the two indices folded in
    swapped order.
10. a count-min sketch (3 x 16) with saturating 4-bit counters stored as
    uint8 (cap 15), tokens over dp8, columns by (a x + b) mod 65521 mod 16;
    int32 counts psum'd then clipped. Bugs: clipped before the psum (sum of
    clipped counts, no final clip), pmax of counts.
11. rolling trigram hash (base 31 mod 65521) of token ids with the
    sequence over sp4, the two previous tokens from the left neighbour by
    ppermute (zeros on rank 0), bucket by remainder 64. Bugs: halo from the
    right neighbour, a cyclic ppermute (rank 0 gets the last tokens).
12. SimHash codes with the 8 projection columns over tp4 (2 bits per rank),
    bits shifted by the rank's bit offset and combined by psum (disjoint
    bits), Hamming distances to a replicated bank by popcount of XOR.
    Bugs: no bit offset, combined by pmax.
13. bits of a replicated uint32 bitset read at global positions, sequence
    over sp4: word me * (tl // 32) + t // 32, bit t % 32 of the LOCAL
    index (equal to the global one as 32 divides the block). Bugs: word
    without the rank offset, offset not scaled by words per block.
14. block and in-block position embeddings by pos // 8 and pos % 8 and a
    multiplicative position hash & 63, sequence over sp4, written with the
    identities (me tl + t) // 8 = me (tl // 8) + t // 8, (me tl + t) % 8 =
    t % 8 and ((a + b) & 63) = ((a & 63) + (b & 63)) & 63. Bugs: block
    without offset, in-block offset with the rank added.
15. byte checksums of a uint8 stream over sp4: the sum mod 256 (baseline
    jnp.sum(dtype=uint8); distributed: local int32 sums cast to uint8, then
    a uint8 psum -- the cast is mod 2^8, a ring homomorphism, so this is
    exact) and Fletcher-style sums mod 251 with global positions. Bugs:
    local positions, no final mod after the psum.
16. an order-independent set hash of tokens over dp8: the wrapping uint32
    sum (psum wraps mod 2^32) and the XOR fold (lax.reduce with
    bitwise_xor, all_gather, fold again). Bugs: pmax for the sum, the XOR
    fold psum'd.
17. bytes of uint32 words with the byte index over tp4 (rank r shifts by
    8 r and masks) against lax.bitcast_convert_type in the baseline. Bugs
    (known misses when written; the witness runs width-changing bitcasts now):
    big-endian shift, shift by the rank instead of 8 x rank.
18. row parity of int32 feature words (dp2 x tp4): popcount sums, local
    & 1, psum over tp, & 1. Bugs: no psum, psum over dp.
19. BERT-style MLM masking with keys from jax.random.split(key, 8) indexed
    by axis_index (dp8): uniform selection, randint replacement ids, the
    number of selected positions psum'd. Bugs: the next rank's key, split
    into 4 keys (ranks share keys).
20. floored relative-distance buckets (k - q) >> 2 (an arithmetic shift
    floors like floor_divide), queries over sp4, a replicated bias table.
    Bugs: local query positions, lax.div (truncates toward zero).
21. row parity of a byte stream held as uint32 words (dp2 x tp4), bytes by
    shifts and masks, popcount, local & 1, psum, & 1. Bugs: no psum, psum
    over dp. (A first draft took the bytes by bitcast_convert_type, which
    left every variant unverified; see 17.)
22. XOR checksum of a byte stream over dp8: local XOR fold, all_gather,
    XOR fold. Bugs: pmax, an OR fold.
23. byte sum mod 256 with the sequence over sp4, local sums & 0xFF before
    the psum and after. Bug: no mask after the psum.
24. Fletcher sums mod 251 with lax.rem before and after the psum. Bug:
    local positions.
25. an int16 wrapping column sum (dp4): local int32 sums cast to int16
    before an int16 psum; baseline jnp.sum(dtype=int16). Bug: pmax.
26. monotone maps of a partial max before the pmax (m >> 3, min(m, 15),
    m // 5) on ids with negatives, sequence over sp4. Bug: psum.
27. int8 row-parallel matmul dequantised per shard (int32 partial product
    to f32, scaled, f32 psum), tp4. Bugs: no psum, weight scale twice.
28. MinHash signatures (4 xorshift hashes, uint32) of two documents with
    tokens over dp4, pmin, Jaccard estimate. Bugs: pmax, one document's
    signature not reduced.
29. hash-partition counts by all_to_all (ep4): per-destination counts
    exchanged and summed. Bugs: own entry without exchange, psum then
    entry 0.
30. per-token absmax rounded to bf16 before the pmax (rounding is monotone),
    int8 quantisation with it, hidden over tp4. Bugs: pmin, local amax.
31. the largest bucket id per row (max // 3) converted to int8 before an
    int8 pmax, sequence over sp4. Bug: psum.
32. a signed int32 hash accumulator cast to uint32 before the psum (same
    width, sums agree mod 2^32), tokens over dp8. Bug: pmax.
33. an int32 sum that overflows alike in both programs (hashes near 2^30,
    batch over dp8), psum then the top 8 bits by >> 24. Bug: shift before
    the psum.
34. a wrapping uint32 product hash of odd factors, sequence over sp4: local
    products, all_gather, product of the gathered. Bug: psum of products.
35. a token histogram by psum_scatter (dp8), 4 of 32 bins per device.
    Bugs: own bins unreduced, the first 4 bins of a psum.
36. valid-token counts cast to uint8 before a uint8 psum (dp8, totals
    below 256), the baseline casting its int32 total. Bug: no psum.
37. Bloom filter bits as a bool array OR'd over sp8 by pmax on bool, a
    query's AND of bits, packed into uint32 words. Bug: pmin.
38. the largest and smallest uint32 fingerprints per column (half of them
    above 2^31), rows over dp4, pmax / pmin on uint32. Bug: compared as
    int32 (bitcast, signed order).
39. whether any token of a row falls in a blocked hash bucket (id & 31
    against 2 blocked ids & 31, sequence over sp4): non-negative local hit counts cast to bool before a pmax, the
    baseline casting the total; the counts psum'd too. Bug: flag not
    reduced.
GSPMD pairs (jax.jit with in/out shardings): 40. a hashed-embedding
regression training step with optax.adam, the table's rows over tp and the
batch over dp; 41. the int8 column-parallel matmul with requantisation of
7.; 42. jnp.bincount of bucketed ids over dp8; 43. jnp.packbits of a bool
mask over (dp, sp) and popcount row sums; 44. a Bloom filter by .at[].set
on a bool bit array from tokens over sp8, packed into uint32 words;
45. jax.random.bernoulli dropout of an activation over (dp, tp) and a row
sum; 46. the byte checksums of 15. over sp4; 47. bitcast_convert_type of
uint32 words to bytes over dp8; 48. the MLM masking of 19. with one key for the whole batch over dp8;
49. the set hash of 16. over dp8; 50. the bitset mask of 13. over sp4;
51. an int16 wrapping sum over dp4; 52. the MinHash Jaccard of 28. over
dp4; 53. the bf16 absmax quantisation of 30. over tp4.
At the time of writing scalify reports three of the correct pairs as
mismatches (dtype-mismatch, "converts a partial sum to u8 / s16 before it
is reduced: the sum is rounded differently"): 15., 25. and 36. An integer
narrowing cast is reduction mod 2^k and commutes with the (wrapping) sum,
and the witness agrees (max abs difference 0).
Numerics: every correct pair agrees with its baseline exactly (integer
outputs, max_abs_diff 0) or at rounding level (f32, below 1e-6); every bug
variant differs clearly (see "numerics").
Run from the repository root: bash samples/gen/run_fresh56.sh [SUBSTR...]
"""
import functools
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh56.sh)
from fresh_lib import Corpus, seeded  # noqa: E402

SCRIPT = "samples/gen/fresh56.py"
C = Corpus("samples/fresh56", SCRIPT, "samples/gen/run_fresh56.sh", sys.argv[1:])
rng, R, I = seeded(5656)
psum, pmax, pmin, pmean, idx = lax.psum, lax.pmax, lax.pmin, lax.pmean, lax.axis_index
U32 = jnp.uint32

# ---------------------------------------------------------------------------
# 1. hashed embeddings, table rows over tp


def knuth_hash(ids, bits=6):
    return ((ids.astype(U32) * U32(2654435761)) >> U32(32 - bits)).astype(jnp.int32)


def xorshift32(ids, nb=64):
    x = ids.astype(U32) + U32(0x9E3779B9)
    x = x ^ (x << 13)
    x = x ^ (x >> 17)
    x = x ^ (x << 5)
    return (x % U32(nb)).astype(jnp.int32)


def hashed_embed(ids, table):
    return table[knuth_hash(ids)] + table[xorshift32(ids)]


def hashed_embed_tp(bug):
    def f(ids, table):
        rows = table.shape[0]
        lo = 0 if bug == "no-row-offset" else idx("tp") * rows
        if bug == "int32-hash":
            h1 = (ids * jnp.int32(-1640531535)) >> 26
        else:
            h1 = knuth_hash(ids)
        out = 0.0
        for h in (h1, xorshift32(ids)):
            loc = h - lo
            mine = (loc >= 0) & (loc < rows)
            out = out + jnp.where(mine[..., None], jnp.take(table, jnp.clip(loc, 0, rows - 1), axis=0), 0.0)
        return psum(out, "dp" if bug == "psum-over-dp" else "tp")
    return f


IDS1 = I(0, 1 << 30, 8, 6)
C.smap("s.hashed_embed_two_hashes_vocab_rows.dp2xtp4", {"dp": 2, "tp": 4}, hashed_embed_tp,
       (P("dp"), P("tp")), P("dp"), hashed_embed, (IDS1, R(64, 16)),
       bugs=[("no-row-offset", ["wrong-offset"]), ("int32-hash", ["dtype-mismatch"]),
             ("psum-over-dp", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 2. Bloom filter build, tokens over sp8, words OR-reduced after all_gather

BLOOM_A = (2654435761, 2246822519, 3266489917)


def bloom_hashes(tok, bits=7):
    t = tok.astype(U32)
    return [((t * U32(a) + U32(k)) >> U32(32 - bits)).astype(jnp.int32) for k, a in enumerate(BLOOM_A)]


def pack_words(bitarr):
    """bool (m,) -> uint32 (m // 32,), bit i of word w is bitarr[32 w + i]."""
    b = bitarr.reshape(-1, 32).astype(U32)
    return jnp.sum(b << jnp.arange(32, dtype=U32), axis=1, dtype=U32)


def bloom_build(tok):
    bits = jnp.zeros(128, bool)
    for h in bloom_hashes(tok):
        bits = bits.at[h].set(True)
    return pack_words(bits)


def bloom_build_sp(bug):
    def f(tok):
        words = jnp.zeros(4, U32)
        for h in bloom_hashes(tok):
            w, b = h >> 5, (h & 31).astype(U32)
            one = jax.nn.one_hot(w, 4, dtype=U32) * (U32(1) << b)[:, None]  # (n, 4)
            words = words | functools.reduce(jnp.bitwise_or, list(one))
        if bug == "local-words-only":
            return words
        if bug == "psum-words":
            return psum(words, "sp")
        g = lax.all_gather(words, "sp")
        op = jnp.bitwise_xor if bug == "xor-reduce" else jnp.bitwise_or
        return functools.reduce(op, [g[i] for i in range(g.shape[0])])
    return f


C.smap("s.bloom_build_or_allgather.sp8", {"sp": 8}, bloom_build_sp, (P("sp"),), P(), bloom_build,
       (I(0, 5000, 24),),
       bugs=[("xor-reduce", ["wrong-reduction"]), ("psum-words", ["wrong-collective-op"]),
             ("local-words-only", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 3. Bloom membership, filter words over tp4


def bloom_query(words, q):
    ok = jnp.ones(q.shape, bool)
    for h in bloom_hashes(q, bits=8):
        ok = ok & (((words[h >> 5] >> (h & 31).astype(U32)) & U32(1)) == 1)
    return ok


def bloom_query_tp(bug):
    def f(words, q):
        nw = words.shape[0]
        lo = 0 if bug == "no-word-offset" else idx("tp") * nw
        ok = jnp.ones(q.shape, jnp.int32)
        for h in bloom_hashes(q, bits=8):
            w = (h >> 5) - lo
            mine = (w >= 0) & (w < nw)
            bit = (words[jnp.clip(w, 0, nw - 1)] >> (h & 31).astype(U32)) & U32(1)
            ok = ok * jnp.where(mine, bit.astype(jnp.int32), 1)
        red = pmax if bug == "pmax-and" else pmin
        return red(ok, "tp") > 0
    return f


FILT = np.packbits(rng.random(256) < 0.75, bitorder="little").view(np.uint32)
C.smap("s.bloom_query_words_tp_pmin.tp4", {"tp": 4}, bloom_query_tp, (P("tp"), P()), P(), bloom_query,
       (FILT, I(0, 100000, 32)),
       bugs=[("pmax-and", ["wrong-collective-op"]), ("no-word-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 4. mask bit packing with popcount, dp2 x sp4


def pack_mask(mask):
    packed = jnp.packbits(mask, axis=-1, bitorder="little")
    return packed, jnp.sum(lax.population_count(packed).astype(jnp.int32), -1)


def pack_mask_sp(bug):
    def f(mask):
        b, t = mask.shape
        m = mask.reshape(b, t // 8, 8).astype(jnp.uint8)
        packed = jnp.sum(m << jnp.arange(8, dtype=jnp.uint8), -1, dtype=jnp.uint8)
        cnt = jnp.sum(lax.population_count(packed).astype(jnp.int32), -1)
        if bug != "count-not-reduced":
            cnt = psum(cnt, "dp" if bug == "count-psum-dp" else "sp")
        return packed, cnt
    return f


C.smap("s.mask_packbits_popcount.dp2xsp4", {"dp": 2, "sp": 4}, pack_mask_sp, (P("dp", "sp"),),
       (P("dp", "sp"), P("dp")), pack_mask, (rng.random((8, 64)) < 0.6,),
       bugs=[("count-psum-dp", ["wrong-collective-group"]), ("count-not-reduced", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 5. integer-division bucket histogram, bins over tp, batch over dp


def bucket_hist(ids):
    return jnp.bincount((ids // 10).ravel(), length=32)


def bucket_hist_sp(bug):
    def f(ids):
        nb = 16
        lo = 0 if bug == "no-bin-offset" else idx("tp") * nb
        c = jnp.sum(jax.nn.one_hot(ids // 10 - lo, nb, dtype=jnp.int32), axis=(0, 1))
        if bug == "pmax-counts":
            return pmax(c, "dp")
        return psum(c, "tp" if bug == "psum-over-tp" else "dp")
    return f


C.smap("s.bucket_histogram_bins_tp.dp4xtp2", {"dp": 4, "tp": 2}, bucket_hist_sp, (P("dp"),), P("tp"),
       bucket_hist, (I(0, 320, 8, 16),),
       bugs=[("no-bin-offset", ["wrong-offset"]), ("psum-over-tp", ["wrong-collective-group"]),
             ("pmax-counts", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 6. int8 row-parallel matmul, int32 psum


def i8mm(x, w, sx, sw):
    acc = lax.dot_general(x, w, (((1,), (0,)), ((), ())), preferred_element_type=jnp.int32)
    return acc.astype(jnp.float32) * sx[:, None] * sw[None, :]


def i8mm_rows(bug):
    def f(x, w, sx, sw):
        acc = lax.dot_general(x, w, (((1,), (0,)), ((), ())),
                              preferred_element_type=jnp.int8 if bug == "int8-accumulate" else jnp.int32)
        acc = acc.astype(jnp.int32)
        if bug == "scale-then-pmean":
            return pmean(acc.astype(jnp.float32) * sx[:, None] * sw[None, :], "tp")
        if bug != "no-psum":
            acc = psum(acc, "tp")
        return acc.astype(jnp.float32) * sx[:, None] * sw[None, :]
    return f


def i8(*s):
    return rng.integers(-127, 128, s).astype(np.int8)


C.smap("s.int8_rowparallel_int32_psum.tp4", {"tp": 4}, i8mm_rows, (P(None, "tp"), P("tp"), P(), P()), P(),
       i8mm, (i8(8, 64), i8(64, 16), np.abs(R(8)) * 0.01 + 0.001, np.abs(R(16)) * 0.01 + 0.001),
       bugs=[("no-psum", ["missing-all-reduce"]), ("scale-then-pmean", ["wrong-scale"]),
             ("int8-accumulate", ["dtype-mismatch"])])

# ---------------------------------------------------------------------------
# 7. int8 column-parallel with per-channel scales sliced, requantised


def i8_col_requant(x, w, sx, sw, so):
    acc = jnp.einsum("bk,kn->bn", x, w, preferred_element_type=jnp.int32)
    y = acc.astype(jnp.float32) * sx[:, None] * sw
    return jnp.clip(jnp.round(y / so), -128, 127).astype(jnp.int8)


def i8_col_tp(bug):
    def f(x, w, sx, sw, so):
        n = w.shape[1]
        r = idx("dp") if bug == "offset-from-dp" else (0 if bug == "scales-offset-zero" else idx("tp"))
        swl = lax.dynamic_slice_in_dim(sw, r * n, n)
        acc = jnp.einsum("bk,kn->bn", x, w, preferred_element_type=jnp.int32)
        y = acc.astype(jnp.float32) * sx[:, None] * swl
        return jnp.clip(jnp.round(y / so), -128, 127).astype(jnp.int8)
    return f


SW7 = (np.abs(R(32)) * 0.02 + 0.002).astype(np.float32)
C.smap("s.int8_colparallel_channel_scales_requant.dp2xtp4", {"dp": 2, "tp": 4}, i8_col_tp,
       (P("dp"), P(None, "tp"), P("dp"), P(), P()), P("dp", "tp"), i8_col_requant,
       (i8(8, 32), i8(32, 32), np.abs(R(8)) * 0.01 + 0.002, SW7, np.float32(0.05)),
       bugs=[("scales-offset-zero", ["wrong-offset"]), ("offset-from-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 8. dynamic per-token activation quantisation, hidden over tp


def dyn_quant_mm(x, w, sw):
    s = jnp.max(jnp.abs(x), -1, keepdims=True) / 127.0
    q = jnp.round(x / s).astype(jnp.int8)
    acc = jnp.matmul(q, w, preferred_element_type=jnp.int32)
    return acc.astype(jnp.float32) * s * sw


def dyn_quant_tp(bug):
    def f(x, w, sw):
        amax = jnp.max(jnp.abs(x), -1, keepdims=True)
        if bug == "amax-psum":
            amax = psum(amax, "tp")
        elif bug != "local-amax":
            amax = pmax(amax, "tp")
        s = amax / 127.0
        q = jnp.round(x / s).astype(jnp.int8)
        acc = psum(jnp.matmul(q, w, preferred_element_type=jnp.int32), "tp")
        return acc.astype(jnp.float32) * s * sw
    return f


C.smap("s.dynamic_token_int8_quant_hidden_tp.tp4", {"tp": 4}, dyn_quant_tp, (P(None, "tp"), P("tp"), P()), P(),
       dyn_quant_mm, (R(8, 32), i8(32, 16), np.abs(R(16)) * 0.01 + 0.001),
       bugs=[("local-amax", ["missing-all-reduce"]), ("amax-psum", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 9. dropout with keys folded per device on dp4 x tp2


def dropout_blocks(x, kd, ndp=4, ntp=2, rate=0.25):
    key = jax.random.wrap_key_data(kd)
    bd, bt = x.shape[0] // ndp, x.shape[1] // ntp
    rows = []
    for i in range(ndp):
        cols = []
        for j in range(ntp):
            k = jax.random.fold_in(jax.random.fold_in(key, i), j)
            cols.append(jax.random.bernoulli(k, 1.0 - rate, (bd, bt)))
        rows.append(jnp.concatenate(cols, 1))
    keep = jnp.concatenate(rows, 0)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def dropout_sm(bug):
    def f(x, kd):
        key = jax.random.wrap_key_data(kd)
        if bug == "indices-swapped":
            k = jax.random.fold_in(jax.random.fold_in(key, idx("tp")), idx("dp"))
        elif bug == "tp-not-folded":
            k = jax.random.fold_in(key, idx("dp"))
        else:
            k = jax.random.fold_in(jax.random.fold_in(key, idx("dp")), idx("tp"))
        keep = jax.random.bernoulli(k, 0.75, x.shape)
        return jnp.where(keep, x / 0.75, 0.0)
    return f


KD = np.array([0, 5656], np.uint32)
C.smap("s.dropout_fold_in_dp_then_tp.dp4xtp2", {"dp": 4, "tp": 2}, dropout_sm, (P("dp", "tp"), P()),
       P("dp", "tp"), dropout_blocks, (R(16, 16), KD),
       bugs=[("tp-not-folded", ["wrong-random-key"]), ("indices-swapped", ["wrong-random-key"])])

# ---------------------------------------------------------------------------
# 10. count-min sketch with saturating uint8 counters

CMS_A, CMS_B = np.array([37, 101, 211], np.int32), np.array([11, 7, 3], np.int32)


def cms_cols(tok):
    return lax.rem(tok[None, :] * CMS_A[:, None] + CMS_B[:, None], 65521) % 16  # (3, n)


def cms(tok):
    c = jnp.zeros((3, 16), jnp.int32).at[jnp.arange(3)[:, None], cms_cols(tok)].add(1)
    return jnp.minimum(c, 15).astype(jnp.uint8)


def cms_dp(bug):
    def f(tok):
        c = jnp.sum(jax.nn.one_hot(cms_cols(tok), 16, dtype=jnp.int32), axis=1)
        if bug == "clip-before-psum":
            return psum(jnp.minimum(c, 15), "dp").astype(jnp.uint8)
        c = pmax(c, "dp") if bug == "pmax-counts" else psum(c, "dp")
        return jnp.minimum(c, 15).astype(jnp.uint8)
    return f


TOK10 = rng.choice(np.array([3, 17, 40, 41, 99, 250], np.int32), 128)
C.smap("s.count_min_sketch_saturating_u8.dp8", {"dp": 8}, cms_dp, (P("dp"),), P(), cms, (TOK10,),
       bugs=[("clip-before-psum", ["wrong-order"]), ("pmax-counts", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 11. rolling trigram hash, sequence over sp4, halo by ppermute

MOD, BASE = 65521, 31


def trigram_buckets(tok):
    p = jnp.pad(tok, ((0, 0), (2, 0)))
    h = (p[:, :-2] * BASE * BASE + p[:, 1:-1] * BASE + p[:, 2:]) % MOD
    return jnp.remainder(h, 64)


def trigram_sp(bug):
    def f(tok):
        n = 4
        if bug == "halo-from-right":
            perm = [(i, i - 1) for i in range(1, n)]
            src = tok[:, :2]
        elif bug == "cyclic-halo":
            perm = [(i, (i + 1) % n) for i in range(n)]
            src = tok[:, -2:]
        else:
            perm = [(i, i + 1) for i in range(n - 1)]
            src = tok[:, -2:]
        halo = lax.ppermute(src, "sp", perm)
        p = jnp.concatenate([halo, tok], 1)
        h = lax.rem(p[:, :-2] * (BASE * BASE) + p[:, 1:-1] * BASE + p[:, 2:], MOD)
        return lax.rem(h, 64)
    return f


C.smap("s.rolling_trigram_hash_halo.sp4", {"sp": 4}, trigram_sp, (P(None, "sp"),), P(None, "sp"),
       trigram_buckets, (I(0, 1000, 2, 32),),
       bugs=[("halo-from-right", ["wrong-permutation"]), ("cyclic-halo", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 12. SimHash codes with projection columns over tp4, Hamming by popcount


def simhash(x, proj, bank):
    bits = (x @ proj > 0).astype(jnp.int32)
    code = jnp.sum(bits << jnp.arange(8, dtype=jnp.int32), -1)
    return lax.population_count(code[:, None] ^ bank[None, :])


def simhash_tp(bug):
    def f(x, proj, bank):
        nl = proj.shape[1]
        off = 0 if bug == "no-bit-offset" else idx("tp") * nl
        bits = (x @ proj > 0).astype(jnp.int32)
        code = jnp.sum(bits << (off + jnp.arange(nl, dtype=jnp.int32)), -1)
        code = pmax(code, "tp") if bug == "pmax-combine" else psum(code, "tp")
        return lax.population_count(code[:, None] ^ bank[None, :])
    return f


C.smap("s.simhash_bits_tp_hamming_popcount.tp4", {"tp": 4}, simhash_tp, (P(), P(None, "tp"), P()), P(),
       simhash, (R(12, 16), R(16, 8), I(0, 256, 10)),
       bugs=[("no-bit-offset", ["wrong-offset"]), ("pmax-combine", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# GSPMD pairs


def hashed_step(table, w, ids, y, opt_state):
    opt = optax.adam(1e-2)

    def loss(p):
        e = jnp.mean(hashed_embed(ids, p["table"]), 1)
        return jnp.mean(jnp.square(e @ p["w"] - y))
    params = {"table": table, "w": w}
    l, g = jax.value_and_grad(loss)(params)
    upd, opt_state = opt.update(g, opt_state, params)
    params = optax.apply_updates(params, upd)
    return params["table"], params["w"], opt_state, l


T13, W13 = R(64, 16), R(16, 4, scale=0.3)
OS13 = optax.adam(1e-2).init({"table": T13, "w": W13})
OS13_SPEC = jax.tree.map(lambda a: P("tp") if np.ndim(a) == 2 and a.shape[0] == 64 else P(), OS13)
C.gspmd("g.hashed_embed_adam_step.dp2xtp4", {"dp": 2, "tp": 4},
        (P("tp"), P(), P("dp"), P("dp"), OS13_SPEC), (P("tp"), P(), OS13_SPEC, P()), hashed_step,
        (T13, W13, I(0, 1 << 30, 8, 6), R(8, 4), OS13))

C.gspmd("g.int8_colparallel_requant.dp2xtp4", {"dp": 2, "tp": 4},
        (P("dp"), P(None, "tp"), P("dp"), P("tp"), P()), P("dp", "tp"), i8_col_requant,
        (i8(8, 32), i8(32, 32), np.abs(R(8)) * 0.01 + 0.002, SW7, np.float32(0.05)))

C.gspmd("g.bincount_bucketed_ids.dp8", {"dp": 8}, (P("dp"),), P(), bucket_hist, (I(0, 320, 16, 8),))

C.gspmd("g.packbits_popcount.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"),), (P("dp", "sp"), P("dp")),
        pack_mask, (rng.random((8, 64)) < 0.4,))

C.gspmd("g.bloom_build_scatter_set.sp8", {"sp": 8}, (P("sp"),), P(), bloom_build, (I(0, 5000, 32),))


def bern_dropout(x, kd):
    keep = jax.random.bernoulli(jax.random.wrap_key_data(kd), 0.8, x.shape)
    return jnp.where(keep, x / 0.8, 0.0) @ jnp.ones((x.shape[1], 4), x.dtype)


C.gspmd("g.bernoulli_dropout_rowsum.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"), P()), P("dp"), bern_dropout,
        (R(8, 16), np.array([1, 56], np.uint32)))

# ---------------------------------------------------------------------------
# 13. bits of a replicated bitset read at global positions, sequence over sp4;
#     the user knows the block (64) is a multiple of the word size (32)


def bitset_mask(words, x):
    t = jnp.arange(x.shape[1])
    bit = (words[t // 32] >> (t % 32).astype(U32)) & U32(1)
    return jnp.where(bit == 1, x, 0.0)


def bitset_mask_sp(bug):
    def f(words, x):
        tl = x.shape[1]
        t = jnp.arange(tl)
        if bug == "word-no-offset":
            w = t // 32
        elif bug == "word-offset-unscaled":
            w = idx("sp") + t // 32
        else:
            w = idx("sp") * (tl // 32) + t // 32
        bit = (words[w] >> (t % 32).astype(U32)) & U32(1)  # t % 32 == global % 32
        return jnp.where(bit == 1, x, 0.0)
    return f


WORDS19 = np.packbits(rng.random(256) < 0.5, bitorder="little").view(np.uint32)
C.smap("s.bitset_global_bits_local_remainder.sp4", {"sp": 4}, bitset_mask_sp, (P(), P(None, "sp")), P(None, "sp"),
       bitset_mask, (WORDS19, R(2, 256)),
       bugs=[("word-no-offset", ["wrong-offset"]), ("word-offset-unscaled", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 14. block / in-block position embeddings by // and %, plus a multiplicative
#     position hash & 63, sequence over sp4 (16 per device, blocks of 8)


def pos_embed(x, eb, eo, eh):
    pos = jnp.arange(x.shape[1])
    return x + eb[pos // 8] + eo[pos % 8] + eh[(pos * 7919) & 63]


def pos_embed_sp(bug):
    def f(x, eb, eo, eh):
        tl, me = x.shape[1], idx("sp")
        t = jnp.arange(tl)
        blk = t // 8 if bug == "block-no-offset" else me * (tl // 8) + t // 8
        off = (me + t) % 8 if bug == "inblock-plus-rank" else t % 8
        hsh = ((me * tl * 7919) & 63) + ((t * 7919) & 63)
        hsh = hsh & 63
        return x + eb[blk] + eo[off] + eh[hsh]
    return f


C.smap("s.block_inblock_hash_positions.sp4", {"sp": 4}, pos_embed_sp, (P(None, "sp"), P(), P(), P()),
       P(None, "sp"), pos_embed, (R(2, 64, 8), R(8, 8), R(8, 8), R(64, 8)),
       bugs=[("block-no-offset", ["wrong-offset"]), ("inblock-plus-rank", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 15. byte checksum and a Fletcher-style position-weighted sum mod 251 over a
#     byte stream whose sequence is over sp4: partial sums cast to uint8
#     before a uint8 psum (sum mod 256 is a ring homomorphism), partial
#     weighted sums reduced mod 251 before the psum and again after


def checksums(b):
    t = jnp.arange(1, b.shape[1] + 1, dtype=jnp.int32)
    s8 = jnp.sum(b, axis=1, dtype=jnp.uint8)
    bi = b.astype(jnp.int32)
    return s8, jnp.sum(bi, 1) % 251, jnp.sum(t * bi, 1) % 251


def checksums_sp(bug):
    def f(b):
        tl = b.shape[1]
        t0 = 1 if bug == "local-positions" else idx("sp") * tl + 1
        t = t0 + jnp.arange(tl, dtype=jnp.int32)
        bi = b.astype(jnp.int32)
        s8 = psum(jnp.sum(bi, 1).astype(jnp.uint8), "sp")
        a = psum(jnp.sum(bi, 1) % 251, "sp") % 251
        w = psum(jnp.sum(t * bi, 1) % 251, "sp")
        if bug != "no-final-mod":
            w = w % 251
        return s8, a, w
    return f


C.smap("s.byte_checksum_u8_fletcher_mod251.sp4", {"sp": 4}, checksums_sp, (P(None, "sp"),), (P(), P(), P()),
       checksums, (rng.integers(0, 256, (4, 64)).astype(np.uint8),),
       bugs=[("local-positions", ["wrong-offset"]), ("no-final-mod", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 16. an order-independent set hash of tokens over dp8: the wrapping uint32
#     sum of xorshift hashes (psum wraps mod 2^32) and their XOR fold


def set_hash(tok):
    h = xorshift32(tok, nb=1 << 16).astype(U32) * U32(0x01000193) + U32(0x811C9DC5)
    return jnp.sum(h, dtype=U32), functools.reduce(jnp.bitwise_xor, list(h))


def set_hash_dp(bug):
    def f(tok):
        h = xorshift32(tok, nb=1 << 16).astype(U32) * U32(0x01000193) + U32(0x811C9DC5)
        s = pmax(jnp.sum(h, dtype=U32), "dp") if bug == "pmax-sum" else psum(jnp.sum(h, dtype=U32), "dp")
        x = lax.reduce(h, U32(0), lax.bitwise_xor, (0,))
        if bug == "xor-by-psum":
            x = psum(x, "dp")
        else:
            g = lax.all_gather(x, "dp")
            x = lax.reduce(g, U32(0), lax.bitwise_xor, (0,))
        return s, x
    return f


C.smap("s.set_hash_wrapping_u32_sum_xor.dp8", {"dp": 8}, set_hash_dp, (P("dp"),), (P(), P()), set_hash,
       (I(0, 1 << 20, 64),),
       bugs=[("pmax-sum", ["wrong-collective-op"]), ("xor-by-psum", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 17. the bytes of uint32 words, the byte index over tp4: rank r shifts by
#     8 r and masks; baseline lax.bitcast_convert_type (little-endian)


def word_bytes(w):
    return lax.bitcast_convert_type(w, jnp.uint8)


def word_bytes_tp(bug):
    def f(w):
        me = idx("tp")
        sh = 8 * (3 - me) if bug == "big-endian" else (me if bug == "shift-by-rank" else 8 * me)
        return ((w >> sh.astype(U32)) & U32(0xFF)).astype(jnp.uint8)[:, None]
    return f


C.smap("s.word_bytes_shift_per_rank.tp4", {"tp": 4}, word_bytes_tp, (P(),), P(None, "tp"), word_bytes,
       (rng.integers(0, 1 << 32, 16, dtype=np.uint64).astype(np.uint32),),
       bugs=[("big-endian", ["wrong-offset"]), ("shift-by-rank", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 18. row parity of int32 feature words (dp2 x tp4): local parities summed
#     over tp, & 1


def row_parity(x):
    return jnp.sum(lax.population_count(x), -1) & 1


def row_parity_tp(bug):
    def f(x):
        p = jnp.sum(lax.population_count(x), -1) & 1
        if bug != "local-parity":
            p = psum(p, "dp" if bug == "psum-over-dp" else "tp")
        return p & 1
    return f


C.smap("s.row_parity_popcount_psum_and1.dp2xtp4", {"dp": 2, "tp": 4}, row_parity_tp, (P("dp", "tp"),), P("dp"),
       row_parity, (I(-(1 << 30), 1 << 30, 8, 32),),
       bugs=[("local-parity", ["missing-all-reduce"]), ("psum-over-dp", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 19. BERT-style token masking with keys from jax.random.split per device
#     (dp8): 15% of positions chosen, 80% [MASK], 10% random id by randint


def mlm_mask_block(key, tok):
    k1, k2, k3 = jax.random.split(key, 3)
    sel = jax.random.uniform(k1, tok.shape) < 0.15
    u = jax.random.uniform(k2, tok.shape)
    rnd = jax.random.randint(k3, tok.shape, 5, 1000)
    out = jnp.where(sel & (u < 0.8), 3, jnp.where(sel & (u < 0.9), rnd, tok))
    return out, sel.astype(jnp.int32)


def mlm_mask(tok, kd):
    keys = jax.random.split(jax.random.wrap_key_data(kd), 8)
    outs = [mlm_mask_block(keys[i], tok[2 * i:2 * i + 2]) for i in range(8)]
    return jnp.concatenate([o[0] for o in outs]), jnp.sum(jnp.stack([o[1].sum() for o in outs]))


def mlm_mask_dp(bug):
    def f(tok, kd):
        keys = jax.random.split(jax.random.wrap_key_data(kd), 4 if bug == "split-count-4" else 8)
        i = idx("dp")
        if bug == "next-rank-key":
            i = (i + 1) % 8
        elif bug == "split-count-4":
            i = i % 4
        out, sel = mlm_mask_block(keys[i], tok)
        return out, psum(sel.sum(), "dp")
    return f


C.smap("s.mlm_masking_split_keys_randint.dp8", {"dp": 8}, mlm_mask_dp, (P("dp"), P()), (P("dp"), P()), mlm_mask,
       (I(5, 1000, 16, 16), np.array([7, 56], np.uint32)),
       bugs=[("next-rank-key", ["wrong-random-key"]), ("split-count-4", ["wrong-random-key"])])

# ---------------------------------------------------------------------------
# 20. floored relative-distance buckets (negative distances round down),
#     queries over sp4, bias table replicated


def rel_bias(bias, tq):
    q = jnp.arange(tq)[:, None]
    k = jnp.arange(tq)[None, :]
    b = jnp.clip(jnp.floor_divide(k - q, 4), -4, 3) + 4
    return bias[:, b]  # (h, q, k)


def rel_bias_sp(bug):
    def f(bias, qdummy):
        tl = qdummy.shape[0]
        q0 = 0 if bug == "local-queries" else idx("sp") * tl
        q = (q0 + jnp.arange(tl))[:, None]
        k = jnp.arange(4 * tl)[None, :]
        d = k - q
        b = (lax.div(d, 4) if bug == "truncating-div" else d >> 2)  # arithmetic shift floors
        return bias[:, jnp.clip(b, -4, 3) + 4]
    return f


C.smap("s.floored_relpos_buckets_shift.sp4", {"sp": 4}, rel_bias_sp, (P(), P("sp")), P(None, "sp"),
       lambda bias, qd: rel_bias(bias, qd.shape[0]), (R(2, 8), np.zeros(32, np.int32)),
       bugs=[("local-queries", ["wrong-offset"]), ("truncating-div", ["wrong-value"])])

# GSPMD pairs of the second group

C.gspmd("g.byte_checksums.sp4", {"sp": 4}, (P(None, "sp"),), (P(), P(), P()), checksums,
        (rng.integers(0, 256, (4, 64)).astype(np.uint8),))
C.gspmd("g.bitcast_words_to_bytes.dp8", {"dp": 8}, (P("dp"),), P("dp"), word_bytes,
        (rng.integers(0, 1 << 32, 16, dtype=np.uint64).astype(np.uint32),))
C.gspmd("g.mlm_masking_one_key.dp8", {"dp": 8}, (P("dp"), P()), (P("dp"), P("dp")),
        lambda tok, kd: mlm_mask_block(jax.random.wrap_key_data(kd), tok),
        (I(5, 1000, 16, 16), np.array([9, 56], np.uint32)))
C.gspmd("g.set_hash_wrapping.dp8", {"dp": 8}, (P("dp"),), (P(), P()), set_hash, (I(0, 1 << 20, 64),))
C.gspmd("g.bitset_mask_positions.sp4", {"sp": 4}, (P(), P(None, "sp")), P(None, "sp"), bitset_mask,
        (WORDS19, R(2, 256)))

# ---------------------------------------------------------------------------
# 21. row parity of a byte stream stored as uint32 words (dp2 x tp4): bytes
#     by bitcast_convert_type, popcount, local parity (& 1), psum over tp, & 1


def word_parity(w):
    by = (w[..., None] >> jnp.array([0, 8, 16, 24], U32)) & U32(0xFF)  # (b, n, 4)
    return jnp.sum(lax.population_count(by).astype(jnp.int32), (-2, -1)) & 1


def word_parity_tp(bug):
    def f(w):
        by = jnp.stack([(w >> U32(8 * k)) & U32(0xFF) for k in range(4)], -1)
        p = jnp.sum(lax.population_count(by).astype(jnp.int32), (-2, -1)) & 1
        if bug != "parity-not-reduced":
            p = psum(p, "dp" if bug == "parity-psum-dp" else "tp")
        return p & 1
    return f


W27 = rng.integers(0, 1 << 32, (8, 16), dtype=np.uint64).astype(np.uint32)
C.smap("s.word_bytes_parity_shifts_psum.dp2xtp4", {"dp": 2, "tp": 4}, word_parity_tp, (P("dp", "tp"),), P("dp"),
       word_parity, (W27,),
       bugs=[("parity-not-reduced", ["missing-all-reduce"]), ("parity-psum-dp", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 22. XOR checksum of a byte stream stored as words, the stream over dp8:
#     bytes by bitcast, local XOR fold, all_gather, XOR fold


def xor_checksum(w):
    by = ((w[:, None] >> jnp.array([0, 8, 16, 24], U32)) & U32(0xFF)).astype(jnp.uint8).reshape(-1)
    return lax.reduce(by, jnp.uint8(0), lax.bitwise_xor, (0,))


def xor_checksum_dp(bug):
    def f(w):
        by = jnp.concatenate([((w >> U32(8 * k)) & U32(0xFF)).astype(jnp.uint8) for k in range(4)])
        x = lax.reduce(by, jnp.uint8(0), lax.bitwise_xor, (0,))
        if bug == "checksum-pmax":
            return pmax(x, "dp")
        g = lax.all_gather(x, "dp")
        if bug == "or-fold":
            return lax.reduce(g, jnp.uint8(0), lax.bitwise_or, (0,))
        return lax.reduce(g, jnp.uint8(0), lax.bitwise_xor, (0,))
    return f


C.smap("s.byte_xor_checksum_shifts_allgather.dp8", {"dp": 8}, xor_checksum_dp, (P("dp"),), P(), xor_checksum,
       (rng.integers(0, 1 << 32, 32, dtype=np.uint64).astype(np.uint32),),
       bugs=[("checksum-pmax", ["wrong-collective-op"]), ("or-fold", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 23. byte sum mod 256 with the sequence over sp4: local int32 sums masked
#     with & 0xFF before the psum and again after (masking is mod 2^8)


def byte_sum_mod256(b):
    return jnp.sum(b.astype(jnp.int32), 1) & 0xFF


def byte_sum_mask_sp(bug):
    def f(b):
        s = jnp.sum(b.astype(jnp.int32), 1) & 0xFF
        s = psum(s, "sp")
        return s if bug == "no-final-mask" else s & 0xFF
    return f


C.smap("s.byte_sum_mask_before_psum.sp4", {"sp": 4}, byte_sum_mask_sp, (P(None, "sp"),), P(), byte_sum_mod256,
       (rng.integers(0, 256, (4, 64)).astype(np.uint8),), bugs=[("no-final-mask", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 24. Fletcher-style sums mod 251 alone (int32 only), partial sums reduced
#     mod 251 before the psum (the modulus is a ring homomorphism)


def fletcher251(b):
    bi = b.astype(jnp.int32)
    t = jnp.arange(1, b.shape[1] + 1, dtype=jnp.int32)
    return jnp.sum(bi, 1) % 251, jnp.sum(t * bi, 1) % 251


def fletcher251_sp(bug):
    def f(b):
        tl = b.shape[1]
        bi = b.astype(jnp.int32)
        t = (1 if bug == "local-positions" else idx("sp") * tl + 1) + jnp.arange(tl, dtype=jnp.int32)
        a = lax.rem(psum(lax.rem(jnp.sum(bi, 1), 251), "sp"), 251)
        w = lax.rem(psum(lax.rem(jnp.sum(t * bi, 1), 251), "sp"), 251)
        return a, w
    return f


C.smap("s.fletcher_mod251_rem_before_psum.sp4", {"sp": 4}, fletcher251_sp, (P(None, "sp"),), (P(), P()),
       fletcher251, (rng.integers(0, 256, (4, 64)).astype(np.uint8),), bugs=[("local-positions", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 25. int16 wrapping token-count checksum (dp4): local int32 counts cast to
#     int16 before an int16 psum, the baseline sums in int16


def i16_sum(x):
    return jnp.sum(x, 0, dtype=jnp.int16)


def i16_sum_dp(bug):
    def f(x):
        s = jnp.sum(x.astype(jnp.int32), 0).astype(jnp.int16)
        return pmax(s, "dp") if bug == "pmax" else psum(s, "dp")
    return f


C.smap("s.int16_wrapping_sum_cast_before_psum.dp4", {"dp": 4}, i16_sum_dp, (P("dp"),), P(), i16_sum,
       (I(0, 30000, 16, 8).astype(np.int16),), bugs=[("pmax", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 26. monotone maps of a partial max before the pmax (sp4): the largest
#     position bucket (max >> 3) and a saturated max (min(max, 15))


def max_buckets(ids):
    return jnp.max(ids, -1) >> 3, jnp.minimum(jnp.max(ids, -1), 15), jnp.max(ids, -1) // 5


def max_buckets_sp(bug):
    def f(ids):
        m = jnp.max(ids, -1)
        red = psum if bug == "psum-not-pmax" else pmax
        a = red(m >> 3, "sp")
        b = red(jnp.minimum(m, 15), "sp")
        c = red(m // 5, "sp")
        return a, b, c
    return f


C.smap("s.monotone_shift_clip_before_pmax.sp4", {"sp": 4}, max_buckets_sp, (P(None, "sp"),), (P(), P(), P()),
       max_buckets, (I(-40, 200, 6, 32),), bugs=[("psum-not-pmax", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 27. int8 row-parallel matmul dequantised per shard (scales applied to the
#     int32 partial product, then an f32 psum), tp4


def i8mm_deq_tp(bug):
    def f(x, w, sx, sw):
        acc = lax.dot_general(x, w, (((1,), (0,)), ((), ())), preferred_element_type=jnp.int32)
        y = acc.astype(jnp.float32) * sx[:, None] * sw[None, :]
        if bug == "scale-twice":
            y = y * sw[None, :]
        return y if bug == "no-psum" else psum(y, "tp")
    return f


C.smap("s.int8_rowparallel_dequant_then_f32_psum.tp4", {"tp": 4}, i8mm_deq_tp, (P(None, "tp"), P("tp"), P(), P()),
       P(), i8mm, (i8(8, 64), i8(64, 16), np.abs(R(8)) * 0.01 + 0.001, np.abs(R(16)) * 0.01 + 0.001),
       bugs=[("no-psum", ["missing-all-reduce"]), ("scale-twice", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 28. MinHash signatures (4 hash functions) of documents whose tokens are over
#     dp4, uint32 hashes (many >= 2^31) pmin'd; Jaccard estimate of two
#     documents from the signatures


def minhash(doc_a, doc_b):
    def sig(t):
        x = t.astype(U32)
        return jnp.stack([jnp.min(xorshift32(x * U32(a) + U32(k), nb=1 << 30).astype(U32) * U32(4) + U32(a), 0)
                          for k, a in enumerate((2654435761, 2246822519, 3266489917, 668265263))])
    sa, sb = sig(doc_a), sig(doc_b)
    return sa, sb, jnp.mean((sa == sb).astype(jnp.float32), 0)


def minhash_dp(bug):
    def f(doc_a, doc_b):
        def sig(t):
            x = t.astype(U32)
            return jnp.stack([jnp.min(xorshift32(x * U32(a) + U32(k), nb=1 << 30).astype(U32) * U32(4) + U32(a), 0)
                              for k, a in enumerate((2654435761, 2246822519, 3266489917, 668265263))])
        red = pmax if bug == "pmax-signature" else pmin
        sa = sig(doc_a) if bug == "doc-b-only-reduced" else red(sig(doc_a), "dp")
        sb = red(sig(doc_b), "dp")
        return sa, sb, jnp.mean((sa == sb).astype(jnp.float32), 0)
    return f


DOC_A = rng.choice(np.arange(40, dtype=np.int32), (16, 3))
DOC_B = np.where(rng.random((16, 3)) < 0.6, DOC_A, rng.choice(np.arange(40, 80, dtype=np.int32), (16, 3)))
C.smap("s.minhash_u32_pmin_jaccard.dp4", {"dp": 4}, minhash_dp, (P("dp"), P("dp")), (P(), P(), P()), minhash,
       (DOC_A, DOC_B),
       bugs=[("pmax-signature", ["wrong-collective-op"]), ("doc-b-only-reduced", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 29. hash partitioning counts with all_to_all (ep4): each device counts its
#     tokens per destination (hash mod 4), the count vectors are exchanged
#     by all_to_all and every device sums what it receives


def dest_counts(tok):
    return jnp.bincount(xorshift32(tok, nb=4).ravel(), length=4)


def dest_counts_ep(bug):
    def f(tok):
        c = jnp.sum(jax.nn.one_hot(xorshift32(tok, nb=4).ravel(), 4, dtype=jnp.int32), 0)  # (4,)
        if bug == "own-entry-no-exchange":
            return lax.dynamic_slice_in_dim(c, idx("ep"), 1)
        if bug == "psum-entry-zero":
            return psum(c, "ep")[:1]
        r = lax.all_to_all(c, "ep", 0, 0, tiled=True)  # r[s] = source s's count for me
        return jnp.sum(r, keepdims=True)
    return f


C.smap("s.hash_partition_counts_all_to_all.ep4", {"ep": 4}, dest_counts_ep, (P("ep"),), P("ep"), dest_counts,
       (I(0, 1 << 24, 32, 4),),
       bugs=[("own-entry-no-exchange", ["missing-collective"]), ("psum-entry-zero", ["wrong-offset"])])

C.gspmd("g.int16_wrapping_sum.dp4", {"dp": 4}, (P("dp"),), P(), i16_sum, (I(0, 30000, 16, 8).astype(np.int16),))
C.gspmd("g.minhash_jaccard.dp4", {"dp": 4}, (P("dp"), P("dp")), (P(), P(), P()), minhash, (DOC_A, DOC_B))

# ---------------------------------------------------------------------------
# 30. per-token absmax rounded to bf16 before the pmax (rounding is monotone,
#     so it commutes with max), then int8 quantisation with that scale; the
#     hidden dim over tp4


def bf16_amax_quant(x):
    amax = jnp.max(jnp.abs(x), -1, keepdims=True).astype(jnp.bfloat16).astype(jnp.float32)
    return jnp.clip(jnp.round(x * (127.0 / amax)), -127, 127).astype(jnp.int8), amax[:, 0]


def bf16_amax_quant_tp(bug):
    def f(x):
        a = jnp.max(jnp.abs(x), -1, keepdims=True).astype(jnp.bfloat16)
        if bug == "amax-pmin":
            a = pmin(a, "tp")
        elif bug != "local-amax":
            a = pmax(a, "tp")
        amax = a.astype(jnp.float32)
        return jnp.clip(jnp.round(x * (127.0 / amax)), -127, 127).astype(jnp.int8), amax[:, 0]
    return f


C.smap("s.bf16_amax_before_pmax_int8_quant.tp4", {"tp": 4}, bf16_amax_quant_tp, (P(None, "tp"),),
       (P(None, "tp"), P()), bf16_amax_quant, (R(8, 32, scale=3.0),),
       bugs=[("amax-pmin", ["wrong-collective-op"]), ("local-amax", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 31. the largest bucket id per row as int8: local int32 max converted to
#     int8 (values fit) before an int8 pmax, sequence over sp4


def max_bucket_i8(ids):
    return (jnp.max(ids, -1) // 3).astype(jnp.int8)


def max_bucket_i8_sp(bug):
    def f(ids):
        m = (jnp.max(ids, -1) // 3).astype(jnp.int8)
        return psum(m, "sp") if bug == "psum" else pmax(m, "sp")
    return f


C.smap("s.int8_partial_max_convert_before_pmax.sp4", {"sp": 4}, max_bucket_i8_sp, (P(None, "sp"),), P(),
       max_bucket_i8, (I(0, 300, 8, 32),), bugs=[("psum", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 32. a signed int32 hash accumulator reinterpreted as uint32 before the psum
#     (same width; the sum mod 2^32 is unchanged), tokens over dp8


def signed_hash_acc(tok):
    h = (xorshift32(tok, nb=1 << 20) - (1 << 19)) * 4099
    return jnp.sum(h, 0).astype(U32)


def signed_hash_acc_dp(bug):
    def f(tok):
        h = (xorshift32(tok, nb=1 << 20) - (1 << 19)) * 4099
        s = jnp.sum(h, 0).astype(U32)
        return pmax(s, "dp") if bug == "pmax" else psum(s, "dp")
    return f


C.smap("s.int32_partial_sum_as_u32_before_psum.dp8", {"dp": 8}, signed_hash_acc_dp, (P("dp"),), P(),
       signed_hash_acc, (I(0, 1 << 24, 64, 4),), bugs=[("pmax", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 33. an int32 sum that overflows (wraps) alike in both programs: hash values
#     near 2^30 summed over a batch over dp8, then the top 8 bits kept


def wrap_sum_top(tok):
    h = xorshift32(tok, nb=1 << 30) + (1 << 29)
    return jnp.sum(h, 0) >> 24


def wrap_sum_top_dp(bug):
    def f(tok):
        h = xorshift32(tok, nb=1 << 30) + (1 << 29)
        s = jnp.sum(h, 0)
        if bug == "shift-before-psum":
            return psum(s >> 24, "dp")
        return psum(s, "dp") >> 24
    return f


C.smap("s.int32_overflowing_sum_top_bits.dp8", {"dp": 8}, wrap_sum_top_dp, (P("dp"),), P(), wrap_sum_top,
       (I(0, 1 << 24, 64, 4),), bugs=[("shift-before-psum", ["wrong-order"])])

# ---------------------------------------------------------------------------
# 34. a wrapping uint32 product hash (FNV-style combine of odd factors) of
#     tokens over sp4: local products, all_gather, product of the gathered


def prod_hash(tok):
    f = (tok.astype(U32) << 1) | U32(1)
    return jnp.prod(f, -1, dtype=U32)


def prod_hash_sp(bug):
    def f(tok):
        loc = jnp.prod((tok.astype(U32) << 1) | U32(1), -1, dtype=U32)
        if bug == "psum-of-products":
            return psum(loc, "sp")
        g = lax.all_gather(loc, "sp")  # (4, b)
        return jnp.prod(g, 0, dtype=U32)
    return f


C.smap("s.wrapping_u32_product_hash_allgather.sp4", {"sp": 4}, prod_hash_sp, (P(None, "sp"),), P(), prod_hash,
       (I(0, 1 << 20, 4, 32),), bugs=[("psum-of-products", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 35. a token histogram by reduce-scatter (dp8): local one_hot counts over 32
#     bins, psum_scatter so that each device owns 4 bins


def hist32(ids):
    return jnp.bincount(ids.ravel() & 31, length=32)


def hist32_dp(bug):
    def f(ids):
        c = jnp.sum(jax.nn.one_hot(ids.ravel() & 31, 32, dtype=jnp.int32), 0)
        if bug == "own-bins-unreduced":
            return lax.dynamic_slice_in_dim(c, idx("dp") * 4, 4)
        if bug == "first-bins":
            return psum(c, "dp")[:4]
        return lax.psum_scatter(c, "dp", scatter_dimension=0, tiled=True)
    return f


C.smap("s.histogram_psum_scatter_bins.dp8", {"dp": 8}, hist32_dp, (P("dp"),), P("dp"), hist32,
       (I(0, 1 << 16, 32, 4),),
       bugs=[("own-bins-unreduced", ["missing-all-reduce"]), ("first-bins", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 36. valid-token counts sent as uint8 to save bandwidth (dp8, totals < 256):
#     local int32 counts cast to uint8, a uint8 psum; the baseline counts in
#     int32 and casts the total


def valid_counts_u8(mask):
    return jnp.sum(mask.astype(jnp.int32), 0).astype(jnp.uint8)


def valid_counts_u8_dp(bug):
    def f(mask):
        c = jnp.sum(mask.astype(jnp.int32), 0).astype(jnp.uint8)
        return c if bug == "no-psum" else psum(c, "dp")
    return f


C.smap("s.counts_as_u8_before_psum.dp8", {"dp": 8}, valid_counts_u8_dp, (P("dp"),), P(), valid_counts_u8,
       (rng.random((64, 16)) < 0.7,), bugs=[("no-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 37. Bloom filter bits as a bool array OR'd across sp8 by pmax on bool (and
#     the all-bits-set AND of a query by pmin on bool), packed into uint32


def bloom_bits_query(tok, q):
    bits = jnp.zeros(128, bool)
    for h in bloom_hashes(tok):
        bits = bits.at[h].set(True)
    hit = functools.reduce(jnp.logical_and, [bits[h] for h in bloom_hashes(q)])
    return pack_words(bits), hit


def bloom_bits_sp(bug):
    def f(tok, q):
        bits = jnp.zeros(128, bool)
        for h in bloom_hashes(tok):
            bits = bits | jnp.any(h[:, None] == jnp.arange(128)[None, :], 0)
        bits = pmin(bits, "sp") if bug == "pmin-bits" else pmax(bits, "sp")
        hit = functools.reduce(jnp.logical_and, [bits[h] for h in bloom_hashes(q)])
        return pack_words(bits), hit
    return f


C.smap("s.bloom_bool_bits_pmax_or.sp8", {"sp": 8}, bloom_bits_sp, (P("sp"), P()), (P(), P()), bloom_bits_query,
       (I(0, 5000, 48), I(0, 5000, 16)), bugs=[("pmin-bits", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 38. the largest and smallest uint32 fingerprint per column (values above
#     2^31, where a signed compare would differ), rows over dp4


def fp_range(tok):
    h = xorshift32(tok, nb=1 << 16).astype(U32) * U32(65537) | U32(0x80000000)
    h = jnp.where(tok % 3 == 0, h & U32(0x7FFFFFFF), h)
    return jnp.max(h, 0), jnp.min(h, 0)


def fp_range_dp(bug):
    def f(tok):
        h = xorshift32(tok, nb=1 << 16).astype(U32) * U32(65537) | U32(0x80000000)
        h = jnp.where(tok % 3 == 0, h & U32(0x7FFFFFFF), h)
        if bug == "signed-compare":
            hs = lax.bitcast_convert_type(h, jnp.int32)
            mx = lax.bitcast_convert_type(pmax(jnp.max(hs, 0), "dp"), U32)
            mn = lax.bitcast_convert_type(pmin(jnp.min(hs, 0), "dp"), U32)
            return mx, mn
        return pmax(jnp.max(h, 0), "dp"), pmin(jnp.min(h, 0), "dp")
    return f


C.smap("s.u32_fingerprint_range_pmax_pmin.dp4", {"dp": 4}, fp_range_dp, (P("dp"),), (P(), P()), fp_range,
       (I(0, 1 << 24, 16, 8),), bugs=[("signed-compare", ["dtype-mismatch"])])

# ---------------------------------------------------------------------------
# 39. whether any token of a row falls in a blocked bucket (sequence over sp4):
#     local hit counts (non-negative) cast to bool before a pmax (OR); the
#     baseline casts the total count


def any_blocked(tok, blocked):
    hits = jnp.sum(((tok[:, :, None] & 31) == (blocked[None, None, :] & 31)).astype(jnp.int32), (1, 2))
    return hits.astype(bool), hits


def any_blocked_sp(bug):
    def f(tok, blocked):
        hits = jnp.sum(((tok[:, :, None] & 31) == (blocked[None, None, :] & 31)).astype(jnp.int32), (1, 2))
        anyh = hits.astype(bool)
        anyh = anyh if bug == "flag-not-reduced" else pmax(anyh, "sp")
        return anyh, psum(hits, "sp")
    return f


C.smap("s.any_hit_bool_cast_before_pmax.sp4", {"sp": 4}, any_blocked_sp, (P(None, "sp"), P()), (P(), P()),
       any_blocked, (I(0, 200, 8, 32), I(0, 200, 2)), bugs=[("flag-not-reduced", ["missing-all-reduce"])])

C.gspmd("g.bf16_amax_int8_quant.tp4", {"tp": 4}, (P(None, "tp"),), (P(None, "tp"), P()), bf16_amax_quant,
        (R(8, 32, scale=3.0),))

C.finish()
