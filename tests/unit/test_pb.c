/* The protobuf reader and writer: text → IR → protobuf → IR round trips, the
 * three containers, gzip, hostile bytes (truncations, flips, hand-made wire
 * errors), fields no text fixture reaches, and real JAX dumps against the text
 * dump of the same module. Every failure must be a diagnostic that names the
 * file and a byte offset; every module returned must pass graph_check. */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "harness.h"
#include "hlo.h"
#include "io.h"
#include "hlo.pb-c.h"
#include "view.h"

char **t_hlo_text_files(void);  /* test_roundtrip.c */

static hlo_module *read_text(const char *path) {
    diag d;
    diag_init(&d, path);
    hlo_module *m = hlo_read_file(path, &d);
    CHECK_MSG(m != NULL, "%s", d.out.s ? d.out.s : "");
    diag_free(&d);
    return m;
}

/* The module as HloModuleProto bytes (caller frees with sb_free). */
static strbuf to_pb(const hlo_module *m) {
    strbuf b;
    sb_init(&b);
    hlo_write_pb(m, &b);
    return b;
}

/* bytes wrapped as field 1 of a message (HloProto.hlo_module, HloSnapshot.hlo). */
static strbuf wrap(const char *s, size_t n) {
    strbuf b;
    sb_init(&b);
    sb_putc(&b, 0x0a);
    for (size_t v = n; ; v >>= 7) {
        sb_putc(&b, (char)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0)));
        if (v < 0x80) break;
    }
    sb_put(&b, s, n);
    return b;
}

static bool equal(const hlo_module *a, const hlo_module *b, int flags) {
    strbuf why;
    sb_init(&why);
    bool eq = graph_equal(a, b, flags, &why);
    CHECK_MSG(eq, "%s", why.s ? why.s : "");
    sb_free(&why);
    return eq;
}

/* True when the one-pass unpacker and the careful path (walker, protobuf-c)
 * agree on bytes read as m with diagnostics d: the same module, printed
 * alike, or the same diagnostics. Prints the first few disagreements. */
static bool same_as_careful(const char *buf, size_t n, const hlo_module *m, const diag *d) {
    static int shown;
    diag cd;
    diag_init(&cd, "x.pb");
    hlo_module *c = hlo_parse_pb_careful((const uint8_t *)buf, n, "x.pb", &cd);
    bool same = (m != NULL) == (c != NULL);
    if (same && m) {
        strbuf a, b;
        sb_init(&a);
        sb_init(&b);
        hlo_print(&a, m);
        hlo_print(&b, c);
        same = graph_equal(m, c, 0, NULL) && a.len == b.len && memcmp(a.s, b.s, a.len) == 0 &&
               strcmp(m->format, c->format) == 0;
        sb_free(&a);
        sb_free(&b);
    } else if (same) {
        same = d->count == cd.count && strcmp(d->out.s ? d->out.s : "", cd.out.s ? cd.out.s : "") == 0;
    }
    if (!same && shown++ < 3)
        printf("  the one-pass unpacker disagrees with protobuf-c on %zu bytes:\n  %s  %s", n,
               d->out.s ? d->out.s : "(a module)\n", cd.out.s ? cd.out.s : "(a module)\n");
    graph_free(c);
    diag_free(&cd);
    return same;
}

/* Parses bytes; true when the outcome is clean: a module that passes
 * graph_check, or none and a diagnostic "name: byte N: ..."; either way the
 * careful path must agree. */
static bool clean(const char *buf, size_t n, bool *parsed, char **msg) {
    diag d;
    diag_init(&d, "x.pb");
    hlo_module *m = hlo_parse_pb((const uint8_t *)buf, n, "x.pb", &d);
    bool ok = m ? graph_check(m, NULL) == 0
                : d.count > 0 && d.out.s && strncmp(d.out.s, "x.pb: ", 6) == 0 && strstr(d.out.s, "byte ");
    ok = same_as_careful(buf, n, m, &d) && ok;
    if (parsed) *parsed = m != NULL;
    if (msg) *msg = xstrdup(d.out.s ? d.out.s : "");
    graph_free(m);
    diag_free(&d);
    return ok;
}

static char *parse_error(const char *buf, size_t n) {
    bool parsed;
    char *msg;
    CHECK(clean(buf, n, &parsed, &msg));
    CHECK_MSG(!parsed, "should have been refused");
    return msg;
}

/* ---- round trips ---- */

static void round_trips(void) {
    char **list = t_hlo_text_files();
    int n = 0;
    for (char **f = list; *f; f++) {
        t_case("pb-1 round trip %s", *f);
        hlo_module *a = read_text(*f);
        if (!a) continue;
        strbuf pb = to_pb(a);
        diag d;
        diag_init(&d, "rt.pb");
        hlo_module *b = hlo_parse_pb((const uint8_t *)pb.s, pb.len, "rt.pb", &d);
        if (CHECK_MSG(b != NULL, "%s", d.out.s ? d.out.s : "")) {
            equal(a, b, GEQ_IGNORE_HEADER);
            CHECK_STR(b->format, "HloModuleProto");
            n++;
        }
        graph_free(a);
        graph_free(b);
        diag_free(&d);
        sb_free(&pb);
    }
    t_free_list(list);
    t_case("pb-1 round trips ran");
    CHECK(n > 0);
}

static void containers(void) {
    hlo_module *a = read_text("tests/cases/variants.hlo");
    if (!a) return;
    strbuf mod = to_pb(a);
    strbuf hp = wrap(mod.s, mod.len);
    /* buffer_assignment (HloProto field 3): an unknown field to skip. */
    sb_put(&hp, "\x1a\x02\x08\x01", 4);
    strbuf snap = wrap(hp.s, hp.len);
    /* execution_platform (HloSnapshot field 4) */
    sb_put(&snap, "\x22\x04Host", 6);
    const strbuf *forms[] = {&mod, &hp, &snap};
    const char *names[] = {"HloModuleProto", "HloProto", "HloSnapshot"};
    for (int i = 0; i < 3; i++) {
        t_case("pb-2 container %s", names[i]);
        diag d;
        diag_init(&d, names[i]);
        hlo_module *b = hlo_parse_pb((const uint8_t *)forms[i]->s, forms[i]->len, names[i], &d);
        if (CHECK_MSG(b != NULL, "%s", d.out.s ? d.out.s : "")) {
            CHECK_STR(b->format, names[i]);
            equal(a, b, GEQ_IGNORE_HEADER);
        }
        graph_free(b);
        diag_free(&d);
    }

    t_case("pb-2 a module whose name is not text is still a module");
    {
        const char *saved = a->name;
        a->name = "odd\x01\x0a name";
        strbuf odd = to_pb(a);
        diag d;
        diag_init(&d, "odd");
        hlo_module *b = hlo_parse_pb((const uint8_t *)odd.s, odd.len, "odd", &d);
        if (CHECK_MSG(b != NULL, "%s", d.out.s ? d.out.s : "")) {
            CHECK_STR(b->format, "HloModuleProto");
            equal(a, b, GEQ_IGNORE_HEADER);
        }
        graph_free(b);
        diag_free(&d);
        sb_free(&odd);
        a->name = saved;
    }

    t_case("pb-3 gzipped HloProto through hlo_read_file");
    char path[] = "/tmp/scalify-pb-XXXXXX";
    int fd = mkstemp(path);
    if (CHECK(fd >= 0)) {
        gzFile gz = gzdopen(fd, "wb");
        CHECK(gz != NULL && gzwrite(gz, hp.s, (unsigned)hp.len) == (int)hp.len);
        CHECK(gzclose(gz) == Z_OK);
        diag d;
        diag_init(&d, path);
        hlo_module *b = hlo_read_file(path, &d);
        if (CHECK_MSG(b != NULL, "%s", d.out.s ? d.out.s : "")) {
            CHECK_STR(b->format, "HloProto");
            equal(a, b, GEQ_IGNORE_HEADER);
        }
        graph_free(b);
        diag_free(&d);
        unlink(path);
    }
    sb_free(&mod);
    sb_free(&hp);
    sb_free(&snap);
    graph_free(a);
}

/* ---- hostile bytes ---- */

static void truncations(const char *name, const char *buf, size_t n, size_t max_cuts) {
    t_case("pb-4 truncated %s", name);
    size_t step = n / max_cuts + 1;
    int bad = 0, cuts = 0, modules = 0;
    for (size_t i = 0; i < n; i += step) {
        bool parsed;
        char *msg;
        if (!clean(buf, i, &parsed, &msg) && bad++ < 3) printf("  not clean at %zu: %s", i, msg);
        free(msg);
        modules += parsed;
        cuts++;
    }
    CHECK_MSG(bad == 0, "%d of %d truncations were not clean", bad, cuts);
    printf("note: %s: %d truncations, %d still a valid module\n", name, cuts, modules);
}

static uint64_t rng_state;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

static void flips(const char *name, const char *buf, size_t n, int count) {
    t_case("pb-5 flipped bytes %s", name);
    char *copy = xmalloc(n);
    int bad = 0, modules = 0;
    rng_state = 42;
    for (int k = 0; k < count; k++) {
        memcpy(copy, buf, n);
        /* One to three bytes changed, at random places, to random values. */
        int changes = 1 + (int)(rnd() % 3);
        for (int c = 0; c < changes; c++) copy[rnd() % n] ^= (char)(1 + rnd() % 255);
        bool parsed;
        char *msg;
        if (!clean(copy, n, &parsed, &msg) && bad++ < 3) printf("  not clean (flip %d): %s", k, msg);
        free(msg);
        modules += parsed;
    }
    CHECK_MSG(bad == 0, "%d of %d flipped inputs were not clean", bad, count);
    printf("note: %s: %d flipped inputs, %d still a valid module\n", name, count, modules);
    free(copy);
}

static void hostile(void) {
    hlo_module *a = read_text("tests/cases/variants.hlo");
    if (a) {
        strbuf mod = to_pb(a);
        strbuf hp = wrap(mod.s, mod.len);
        truncations("variants HloModuleProto", mod.s, mod.len, mod.len);
        truncations("variants HloProto", hp.s, hp.len, hp.len);
        flips("variants", mod.s, mod.len, 400);
        sb_free(&mod);
        sb_free(&hp);
        graph_free(a);
    }
    /* A real dump when the samples are there. */
    char **list = t_list("samples/tiny", ".dist.hlo.pb");
    if (list[0]) {
        size_t n;
        char *buf = t_read(list[0], &n);
        if (buf) {
            truncations(list[0], buf, n, 500);
            flips(list[0], buf, n, 300);
        }
        free(buf);
    } else {
        printf("note: no samples/tiny/*.dist.hlo.pb; real dumps were not truncated\n");
    }
    t_free_list(list);
}

/* Hand-made wire errors: the message names the offset and the field. */
static void wire_errors(void) {
    t_case("pb-6 empty input");
    char *msg = parse_error("", 0);
    CHECK_CONTAINS(msg, "x.pb: byte 0: empty input");
    free(msg);

    t_case("pb-6 length past the end");
    /* name "m", then computations with a length of 9 but 2 bytes left */
    msg = parse_error("\x0a\x01m\x1a\x09\x0a\x00", 7);
    CHECK_CONTAINS(msg, "x.pb: byte 3: field computations[0]: length 9 runs past the end");
    free(msg);

    t_case("pb-6 bad wire type inside a computation");
    msg = parse_error("\x0a\x01m\x1a\x02\x0b\x00", 7);
    CHECK_CONTAINS(msg, "byte 5: field computations[0].name: wire type 3 is not valid");
    free(msg);

    t_case("pb-6 unterminated varint");
    msg = parse_error("\x0a\x01m\x28\xff\xff", 6);
    CHECK_CONTAINS(msg, "byte 4: field id: varint is cut off");
    free(msg);

    t_case("pb-6 string field given as a varint");
    msg = parse_error("\x0a\x01m\x10\x01", 5);
    CHECK_CONTAINS(msg, "byte 3: field entry_computation_name: wire type 0 where the field needs 2");
    free(msg);

    t_case("pb-6 packed run cut inside a value");
    /* computations[0].instructions[0].shape.dimensions = packed {1, <cut>} */
    msg = parse_error("\x1a\x08\x12\x06\x1a\x04\x1a\x02\x01\x81", 10);
    CHECK_CONTAINS(msg, "field computations[0].instructions[0].shape.dimensions: packed varint is cut off");
    free(msg);

    t_case("pb-6 deep nesting is refused before protobuf-c recurses");
    /* ShapeProto.tuple_shapes nested 5000 deep inside one instruction */
    strbuf b;
    sb_init(&b);
    strbuf inner;
    sb_init(&inner);
    for (int i = 0; i < 5000; i++) {
        strbuf t = wrap(inner.s ? inner.s : "", inner.len);
        t.s[0] = 0x22; /* field 4 */
        sb_free(&inner);
        inner = t;
    }
    strbuf shp = wrap(inner.s, inner.len);
    shp.s[0] = 0x1a; /* instruction.shape */
    strbuf instr = wrap(shp.s, shp.len);
    instr.s[0] = 0x12; /* computation.instructions */
    strbuf comp = wrap(instr.s, instr.len);
    comp.s[0] = 0x1a; /* module.computations */
    msg = parse_error(comp.s, comp.len);
    CHECK_CONTAINS(msg, "nested deeper than");
    free(msg);
    sb_free(&b);
    sb_free(&inner);
    sb_free(&shp);
    sb_free(&instr);
    sb_free(&comp);

    t_case("pb-6 a huge claimed count allocates nothing");
    /* a packed dimensions run claiming 2^31 bytes in a 16-byte input */
    msg = parse_error("\x1a\x0c\x12\x0a\x1a\x08\x1a\x86\x80\x80\x80\x08\x01\x02", 14);
    CHECK_CONTAINS(msg, "runs past the end");
    free(msg);

    t_case("pb-6 many empty messages hit the memory cap");
    /* One computation holding 2^19 empty instructions: 2 bytes each on the
     * wire, hundreds once unpacked. */
    size_t n = 1 << 20, len = n - 5;
    char *many = xmalloc(n);
    many[0] = 0x1a;
    for (int k = 0; k < 4; k++) many[1 + k] = (char)(((len >> (7 * k)) & 0x7f) | (k < 3 ? 0x80 : 0));
    for (size_t i = 5; i < n; i++) many[i] = (i - 5) % 2 ? 0 : 0x12;
    msg = parse_error(many, n);
    CHECK_CONTAINS(msg, "MiB of memory");
    free(msg);
    free(many);
}

/* ---- wire forms the one-pass unpacker leaves to protobuf-c, or must read as it does ---- */

/* A module "m" with one computation "c" holding one parameter "p" of shape
 * f32 plus the given ShapeProto fields. */
static strbuf module_with_shape(const char *shape_fields, size_t n) {
    strbuf sh, instr, comp, mod;
    sb_init(&sh);
    sb_put(&sh, "\x10\x0b", 2); /* element_type F32 */
    sb_put(&sh, shape_fields, n);
    sb_init(&instr);
    sb_put(&instr, "\x0a\x01p\x12\x09parameter", 14);
    strbuf s = wrap(sh.s, sh.len);
    s.s[0] = 0x1a; /* instruction.shape */
    sb_put(&instr, s.s, s.len);
    sb_put(&instr, "\x98\x02\x01", 3); /* id 1 */
    sb_init(&comp);
    sb_put(&comp, "\x0a\x01" "c" "\x28\x01", 5);
    strbuf i = wrap(instr.s, instr.len);
    i.s[0] = 0x12; /* computation.instructions */
    sb_put(&comp, i.s, i.len);
    sb_init(&mod);
    sb_put(&mod, "\x0a\x01m", 3);
    strbuf c = wrap(comp.s, comp.len);
    c.s[0] = 0x1a; /* module.computations */
    sb_put(&mod, c.s, c.len);
    sb_free(&sh);
    sb_free(&s);
    sb_free(&instr);
    sb_free(&i);
    sb_free(&comp);
    sb_free(&c);
    return mod;
}

static hlo_module *parse_ok(const strbuf *b);

static void one_pass_edges(void) {
    t_case("pb-9 a repeated field given packed, unpacked and packed again");
    strbuf b = module_with_shape("\x1a\x02\x02\x03\x18\x04\x1a\x01\x05", 9);
    bool parsed;
    char *msg;
    CHECK(clean(b.s, b.len, &parsed, &msg));
    if (CHECK_MSG(parsed, "%s", msg)) {
        hlo_module *m = parse_ok(&b);
        if (m) CHECK_EQ(m->comps[0].instrs[0].shape.rank, 4);
        graph_free(m);
    }
    free(msg);
    sb_free(&b);

    t_case("pb-9 a message field given twice is merged as protobuf-c merges it");
    b = module_with_shape("\x2a\x02\x0a\x00\x1a\x01\x04\x2a\x03\x0a\x01\x00", 12);
    CHECK(clean(b.s, b.len, &parsed, &msg));
    free(msg);
    sb_free(&b);

    t_case("pb-9 a packed bool other than 0 or 1 reads as protobuf-c reads it");
    b = module_with_shape("\x1a\x01\x04\x32\x01\x02", 6);
    CHECK(clean(b.s, b.len, &parsed, &msg));
    free(msg);
    sb_free(&b);

    t_case("pb-9 a complex literal kept as text with a word in it reads the same on both paths");
    {
        /* (found by make fuzz: the two readers gave one module, which the
         * comparison of complex literals kept as text called different) */
        size_t n;
        diag dg;
        diag_init(&dg, "complex-word-literal.pb");
        char *bytes = io_read_file("tests/cases/pb/complex-word-literal.pb", &n, NULL, &dg);
        CHECK(bytes != NULL);
        if (bytes) CHECK(clean(bytes, n, &parsed, &msg)), CHECK_MSG(parsed, "%s", msg), free(msg);
        free(bytes);
        diag_free(&dg);
    }

    t_case("pb-9 unknown fields of every wire type are skipped");
    /* field 127 as varint, 64-bit, length-delimited and 32-bit; field 200 as varint */
    b = module_with_shape("\x1a\x01\x04\xf8\x07\x2a\xf9\x07\x01\x02\x03\x04\x05\x06\x07\x08"
                          "\xfa\x07\x02\x01\x02\xfd\x07\x01\x02\x03\x04\xc0\x0c\x01",
                          30);
    CHECK(clean(b.s, b.len, &parsed, &msg));
    CHECK_MSG(parsed, "%s", msg);
    free(msg);
    sb_free(&b);
}

/* ---- conversion errors carry the instruction's offset and field ---- */

static Xla__HloInstructionProto *instr(const char *name, const char *op, int dt, int64_t id) {
    Xla__HloInstructionProto *ip = xcalloc(1, sizeof *ip);
    xla__hlo_instruction_proto__init(ip);
    ip->name = (char *)name;
    ip->opcode = (char *)op;
    ip->shape = xcalloc(1, sizeof *ip->shape);
    xla__shape_proto__init(ip->shape);
    ip->shape->element_type = (Xla__PrimitiveType)dt;
    ip->id = id;
    return ip;
}

static void free_instr(Xla__HloInstructionProto *ip) {
    free(ip->shape);
    free(ip);
}

/* Packs a one-computation module around instrs; caller frees. */
static strbuf pack(Xla__HloInstructionProto **instrs, size_t n) {
    Xla__HloComputationProto c = XLA__HLO_COMPUTATION_PROTO__INIT;
    c.name = "main";
    c.id = 1;
    c.n_instructions = n;
    c.instructions = instrs;
    Xla__HloComputationProto *cs[] = {&c};
    Xla__HloModuleProto m = XLA__HLO_MODULE_PROTO__INIT;
    m.name = "hand";
    m.n_computations = 1;
    m.computations = cs;
    strbuf b;
    sb_init(&b);
    size_t len = protobuf_c_message_get_packed_size(&m.base);
    XGROW(b.s, b.cap, len + 1);
    protobuf_c_message_pack(&m.base, (uint8_t *)b.s);
    b.len = len;
    b.s[len] = 0;
    return b;
}

static hlo_module *parse_ok(const strbuf *b) {
    diag d;
    diag_init(&d, "hand.pb");
    hlo_module *m = hlo_parse_pb((const uint8_t *)b->s, b->len, "hand.pb", &d);
    CHECK_MSG(m != NULL, "%s", d.out.s ? d.out.s : "");
    diag_free(&d);
    return m;
}

static void conversion(void) {
    Xla__HloInstructionProto *p0 = instr("p0", "parameter", DT_F32, 10);
    Xla__HloInstructionProto *neg = instr("neg", "negate", DT_F32, 11);
    Xla__HloInstructionProto *odd = instr("odd", "my-new-op", DT_F32, 12);
    int64_t later[] = {12}, p0id[] = {10};

    t_case("pb-7 operand defined after its use");
    neg->n_operand_ids = 1;
    neg->operand_ids = later;
    Xla__HloInstructionProto *v1[] = {p0, neg, odd};
    strbuf b = pack(v1, 3);
    char *msg = parse_error(b.s, b.len);
    CHECK_CONTAINS(msg, "field computations[0].instructions[1].operand_ids: operand 0 (odd) is not defined before its use");
    free(msg);
    sb_free(&b);

    t_case("pb-7 unknown opcode is kept");
    neg->operand_ids = p0id;
    odd->n_operand_ids = 1;
    odd->operand_ids = p0id;
    b = pack(v1, 3);
    hlo_module *m = parse_ok(&b);
    if (m) {
        const hlo_instr *in = &m->comps[0].instrs[2];
        CHECK_EQ(in->op, OP_UNKNOWN);
        CHECK_STR(in->opname, "my-new-op");
        CHECK_EQ(m->comps[0].root, 2);
        CHECK(m->comps[0].is_entry);
    }
    graph_free(m);
    sb_free(&b);

    t_case("pb-7 invalid element type");
    neg->shape->element_type = (Xla__PrimitiveType)99;
    b = pack(v1, 3);
    msg = parse_error(b.s, b.len);
    CHECK_CONTAINS(msg, "field computations[0].instructions[1].shape: invalid element type 99");
    free(msg);
    sb_free(&b);
    neg->shape->element_type = XLA__PRIMITIVE_TYPE__F32;

    t_case("pb-7 negative dimension");
    int64_t dims[] = {4, -2};
    neg->shape->n_dimensions = 2;
    neg->shape->dimensions = dims;
    b = pack(v1, 3);
    msg = parse_error(b.s, b.len);
    CHECK_CONTAINS(msg, "instructions[1].shape: invalid shape");
    free(msg);
    sb_free(&b);
    neg->shape->n_dimensions = 0;

    t_case("pb-7 missing parameter number");
    p0->parameter_number = 1;
    b = pack(v1, 3);
    msg = parse_error(b.s, b.len);
    CHECK_CONTAINS(msg, "computation main has no parameter 0");
    free(msg);
    sb_free(&b);
    p0->parameter_number = 0;

    t_case("pb-7 unknown called computation");
    int64_t nowhere[] = {77};
    neg->n_called_computation_ids = 1;
    neg->called_computation_ids = nowhere;
    b = pack(v1, 3);
    msg = parse_error(b.s, b.len);
    CHECK_CONTAINS(msg, "instructions[1].called_computation_ids: no computation has id 77");
    free(msg);
    sb_free(&b);
    neg->n_called_computation_ids = 0;

    t_case("pb-7 a computation calling itself");
    int64_t self[] = {1};
    neg->n_called_computation_ids = 1;
    neg->called_computation_ids = self;
    b = pack(v1, 3);
    msg = parse_error(b.s, b.len);
    CHECK_CONTAINS(msg, "cycle");
    free(msg);
    sb_free(&b);
    neg->n_called_computation_ids = 0;

    free_instr(p0);
    free_instr(neg);
    free_instr(odd);
}

/* Text → IR → protobuf → IR for a module given inline. */
static void text_round_trip(const char *name, const char *src) {
    t_case("pb-8 %s", name);
    diag d;
    diag_init(&d, name);
    hlo_module *t = hlo_parse_text(src, strlen(src), name, &d);
    if (CHECK_MSG(t != NULL, "%s", d.out.s ? d.out.s : "")) {
        strbuf pb = to_pb(t);
        hlo_module *r = parse_ok(&pb);
        if (r) equal(t, r, GEQ_IGNORE_HEADER);
        graph_free(r);
        sb_free(&pb);
    }
    graph_free(t);
    diag_free(&d);
}

/* ---- fields the text fixtures do not reach ---- */

static void fields(void) {
    Xla__HloInstructionProto *p0 = instr("p0", "parameter", DT_F32, 1);
    Xla__HloInstructionProto *ar = instr("ar", "all-gather", DT_F32, 2); /* all-reduce would need a reducer */
    Xla__HloInstructionProto *cmp = instr("cmp", "compare", DT_PRED, 3);
    Xla__HloInstructionProto *c16 = instr("c16", "constant", DT_F16, 4);
    int64_t op[] = {1}, ops2[] = {1, 1}, reshape[] = {2, 4};
    int32_t perm[] = {1, 0};
    ar->n_operand_ids = 1;
    ar->operand_ids = op;
    Xla__IotaReplicaGroupListProto iota = XLA__IOTA_REPLICA_GROUP_LIST_PROTO__INIT;
    iota.num_replica_groups = 4;
    iota.num_devices_per_group = 2;
    iota.n_iota_reshape_dims = 2;
    iota.iota_reshape_dims = reshape;
    iota.n_iota_transpose_perm = 2;
    iota.iota_transpose_perm = perm;
    Xla__CollectiveDeviceListProto cdl = XLA__COLLECTIVE_DEVICE_LIST_PROTO__INIT;
    cdl.iota_replica_group_list = &iota;
    ar->collective_device_list = &cdl;
    ar->channel_id = -1; /* non-positive: no channel */
    cmp->n_operand_ids = 2;
    cmp->operand_ids = ops2;
    cmp->comparison_direction = "LT";
    cmp->comparison_type = "FLOAT"; /* the default for f32: no text */
    Xla__PrecisionConfig pc = XLA__PRECISION_CONFIG__INIT;
    Xla__PrecisionConfig__Precision prec[] = {0, 0};
    pc.n_operand_precision = 2;
    pc.operand_precision = prec;
    cmp->precision_config = &pc;
    Xla__LiteralProto lit = XLA__LITERAL_PROTO__INIT;
    uint8_t half[] = {0x00, 0x3c, 0x00, 0xc0, 0x01, 0x00}; /* 1, -2, 2^-24 */
    int64_t three[] = {3};
    c16->shape->n_dimensions = 1;
    c16->shape->dimensions = three;
    lit.f16s.data = half;
    lit.f16s.len = sizeof half;
    c16->literal = &lit;
    Xla__HloInstructionProto *cx = instr("cx", "constant", DT_C64, 5);
    Xla__LiteralProto clit = XLA__LITERAL_PROTO__INIT;
    float parts[] = {1, 2, 3, -4.5f};
    int64_t two[] = {2};
    cx->shape->n_dimensions = 1;
    cx->shape->dimensions = two;
    clit.n_c64s = 4;
    clit.c64s = parts;
    cx->literal = &clit;
    Xla__HloInstructionProto *v[] = {p0, ar, cmp, c16, cx};
    strbuf b = pack(v, 5);
    hlo_module *m = parse_ok(&b);
    if (m) {
        const hlo_comp *c = &m->comps[0];
        t_case("pb-8 iota groups from collective_device_list");
        const hlo_attr *g = instr_attr(&c->instrs[1], A_REPLICA_GROUPS);
        if (CHECK(g != NULL)) {
            CHECK(g->v.groups->iota);
            CHECK_EQ(g->v.groups->ngroups, 4);
            CHECK_EQ(g->v.groups->nperm, 2);
        }
        CHECK(instr_attr(&c->instrs[1], A_CHANNEL_ID) == NULL);
        t_case("pb-8 defaults XLA's printer leaves out");
        CHECK_STR(instr_str(&c->instrs[2], A_DIRECTION), "LT");
        CHECK(instr_attr(&c->instrs[2], A_COMPARE_TYPE) == NULL);
        CHECK(instr_attr(&c->instrs[2], A_OPERAND_PRECISION) == NULL);
        t_case("pb-8 f16 literal bytes");
        const hlo_attr *l = instr_attr(&c->instrs[3], A_LITERAL);
        if (CHECK(l != NULL && l->v.lit->f != NULL && l->v.lit->count == 3)) {
            CHECK(l->v.lit->f[0] == 1.0);
            CHECK(l->v.lit->f[1] == -2.0);
            CHECK(l->v.lit->f[2] == 0x1p-24);
        }
        t_case("pb-8 complex literal kept as text, as XLA prints it");
        l = instr_attr(&c->instrs[4], A_LITERAL);
        if (CHECK(l != NULL)) CHECK_STR(l->v.lit->raw, "{(1, 2), (3, -4.5)}");
    }
    graph_free(m);
    sb_free(&b);
    free_instr(p0);
    free_instr(ar);
    free_instr(cmp);
    free_instr(c16);
    free_instr(cx);

    t_case("pb-8 narrow float codes");
    CHECK_EQ(hlo_float_encode(DT_BF16, 1.0), 0x3f80);
    CHECK(hlo_float_decode(DT_F8E4M3FN, 0x7e) == 448.0);
    CHECK(hlo_float_decode(DT_F8E5M2, 0x7c) == INFINITY);
    CHECK(hlo_float_decode(DT_F8E4M3FNUZ, 0x80) != hlo_float_decode(DT_F8E4M3FNUZ, 0x80)); /* NaN */
    CHECK(hlo_float_decode(DT_F4E2M1FN, 0x7) == 6.0);
    CHECK(hlo_float_decode(DT_F8E8M0FNU, 127) == 1.0);
    int bad = 0;
    int kinds[] = {DT_F16, DT_BF16, DT_F8E5M2, DT_F8E4M3, DT_F8E3M4, DT_F8E4M3FN, DT_F8E4M3B11FNUZ,
                   DT_F8E5M2FNUZ, DT_F8E4M3FNUZ, DT_F8E8M0FNU};
    for (size_t k = 0; k < ARRAY_LEN(kinds); k++)
        for (uint32_t code = 0; code < (kinds[k] == DT_F16 || kinds[k] == DT_BF16 ? 65536u : 256u); code++) {
            double x = hlo_float_decode(kinds[k], code);
            if (x == x && x != 0 && hlo_float_decode(kinds[k], hlo_float_encode(kinds[k], x)) != x) bad++;
        }
    CHECK_EQ(bad, 0);

    const char *src =
        "HloModule conv\n"
        "ENTRY e {\n"
        "  x = f32[1,8,8,4]{3,2,1,0} parameter(0)\n"
        "  k = f32[3,3,4,2]{3,2,1,0} parameter(1)\n"
        "  c = f32[1,4,4,2]{3,2,1,0} convolution(x, k), window={size=3x3 stride=2x2 pad=1_1x1_1 rhs_reversal=1x0}, "
        "dim_labels=b01f_01io->b01f, feature_group_count=1\n"
        "  w = f32[1,4,4,2]{3,2,1,0} convolution(x, k), window={size=3x3 stride=1x1}, dim_labels=f01b_i01o->01bf\n"
        "  h = f16[2] constant({1.5, -0.0001})\n"
        "  bf = bf16[2] constant({3.140625, 1e30})\n"
        "  f8 = f8e4m3fn[3] constant({0.5, -448, 0.0078125})\n"
        "  s4 = s4[3] constant({-8, 7, 0})\n"
        "  u16 = u16[2] constant({65535, 1})\n"
        "  s8 = s8[2] constant({-128, 127})\n"
        "  u64 = u64[1] constant({18446744073709551615})\n"
        "  f64 = f64[1] constant({0.1})\n"
        "  cx = c64[2] constant({(1, 2), (3, -4)})\n"
        "  e = f32[2] constant({...})\n"
        "  lo = f32[] constant(0)\n"
        "  hi = f32[] constant(1)\n"
        "  rng = f32[4] rng(lo, hi), distribution=rng_uniform\n"
        "  seed = u64[2] constant({1, 2})\n"
        "  rbg = (u64[2], u32[4]) rng-bit-generator(seed), algorithm=rng_philox\n"
        "  ROOT t = (f32[1,4,4,2]{3,2,1,0}, f32[1,4,4,2]{3,2,1,0}) tuple(c, w), mystery={a, {b}}\n"
        "}\n";
    text_round_trip("window, dim_labels and literals of every width", src);

    t_case("pb-8 canonical window and dim_labels travel in XLA's fields");
    diag d;
    diag_init(&d, "conv.hlo");
    hlo_module *t = hlo_parse_text(src, strlen(src), "conv.hlo", &d);
    if (CHECK(t != NULL)) {
        strbuf pb = to_pb(t);
        Xla__HloModuleProto *mp =
            xla__hlo_module_proto__unpack(NULL, pb.len, (const uint8_t *)pb.s);
        if (CHECK(mp != NULL)) {
            const Xla__HloInstructionProto *c = mp->computations[0]->instructions[2];
            CHECK_STR(c->name, "c");
            CHECK(c->window != NULL && c->window->n_dimensions == 2 && c->window->dimensions[0]->window_reversal);
            CHECK(c->convolution_dimension_numbers != NULL);
            /* feature_group_count=1 is XLA's default: it comes back only as text */
            CHECK(c->n_scalify_text_attributes == 1 &&
                  strcmp(c->scalify_text_attributes[0]->key, "feature_group_count") == 0);
            /* stride=1x1 only restates the default: kept as text to come back */
            CHECK_EQ(mp->computations[0]->instructions[3]->n_scalify_text_attributes, 1);
            xla__hlo_module_proto__free_unpacked(mp, NULL);
        }
        sb_free(&pb);
    }
    graph_free(t);
    diag_free(&d);
}

static void order(void) {
    /* Parameters out of order and a control predecessor defined after the
     * instruction naming it: conversion resolves both once the computation's
     * instructions are all known. */
    text_round_trip("parameters out of order, a control predecessor named before it is defined",
        "HloModule ctrl\n"
        "\n"
        "ENTRY e {\n"
        "  q = f32[4]{0} parameter(1)\n"
        "  p = f32[4]{0} parameter(0)\n"
        "  a = f32[4]{0} add(p, q), control-predecessors={m}\n"
        "  m = f32[4]{0} multiply(p, q)\n"
        "  ROOT r = f32[4]{0} subtract(a, m)\n"
        "}\n");
}

static void collectives(void) {
    text_round_trip("mesh and iota groups, subgroup shardings, pairs, compare type",
        "HloModule mesh\n"
        "\n"
        "add {\n"
        "  x = f32[] parameter(0)\n"
        "  y = f32[] parameter(1)\n"
        "  ROOT s = f32[] add(x, y)\n"
        "}\n"
        "\n"
        "ENTRY e {\n"
        "  p = f32[8]{0} parameter(0), sharding={devices=[2,2,2]<=[2,4]T(1,0) last_tile_dims={manual}}\n"
        "  ar = f32[8]{0} all-reduce(p), channel_id=1, replica_groups=mesh['a'=2,'b'=4], device_ids=([4,2]T(1,0)) {'b':(1)2}, use_global_device_ids=true, to_apply=add\n"
        "  ag = f32[16]{0} all-gather(ar), channel_id=2, replica_groups=[4,2]<=[2,4]T(1,0), dimensions={0}\n"
        "  cp = f32[16]{0} collective-permute(ag), channel_id=3, source_target_pairs={{0,1},{1,0}}\n"
        "  i = s32[16]{0} iota(), iota_dimension=0\n"
        "  c = pred[16]{0} compare(i, i), direction=GE, type=TOTALORDER\n"
        "  ROOT t = (f32[16]{0}, pred[16]{0}) tuple(cp, c)\n"
        "}\n");
}

/* ---- real dumps: protobuf and text of the same module ---- */

/* b's computations permuted into a's order (by name), call references
 * remapped: XLA's text printers and its proto writer list computations in
 * different orders, which says nothing about the readers. */
static bool align_computations(const hlo_module *a, hlo_module *b) {
    if (a->ncomps != b->ncomps) return false;
    uint32_t n = b->ncomps, *to = xmalloc(n * sizeof *to);
    bool ok = true;
    for (uint32_t i = 0; i < n && ok; i++) {
        ok = false;
        for (uint32_t j = 0; j < n && !ok; j++)
            if (strcmp(b->comps[i].name, a->comps[j].name) == 0) {
                to[i] = j;
                ok = true;
            }
    }
    if (ok) {
        hlo_comp *moved = arena_alloc(&b->arena, n * sizeof *moved);
        for (uint32_t i = 0; i < n; i++) moved[to[i]] = b->comps[i];
        b->comps = moved;
        b->entry = to[b->entry];
        for (uint32_t c = 0; c < n; c++)
            for (uint32_t i = 0; i < b->comps[c].ninstrs; i++) {
                hlo_instr *in = &b->comps[c].instrs[i];
                for (uint32_t k = 0; k < in->nattrs; k++) {
                    hlo_attr *at = &in->attrs[k];
                    uint32_t cnt = at->kind == K_COMP ? 1 : at->kind == K_COMPS ? at->n : 0;
                    for (uint32_t j = 0; j < cnt; j++) at->v.ints[j] = to[at->v.ints[j]];
                }
            }
    }
    free(to);
    return ok;
}

static char **dumps;
static size_t ndumps, capdumps;

static int collect_dump(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)ftw;
    size_t n = strlen(path);
    bool pb = n > 7 && strcmp(path + n - 7, ".hlo.pb") == 0;
    bool pbgz = n > 10 && strcmp(path + n - 10, ".hlo.pb.gz") == 0;
    if (flag == FTW_F && (pb || pbgz)) {
        XGROW(dumps, capdumps, ndumps + 1);
        dumps[ndumps++] = xstrdup(path);
    }
    return 0;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static bool same_values(const hlo_comp *ca, const hlo_comp *cb, strbuf *why);

/* Every samples/ protobuf dump with the text dump of the same module beside it
 * (x.hlo.pb or x.hlo.pb.gz next to x.hlo or x.hlo.gz). */
static void sample_pairs(void) {
    dumps = NULL;
    ndumps = capdumps = 0;
    nftw("samples", collect_dump, 16, FTW_PHYS);
    if (ndumps) qsort(dumps, ndumps, sizeof *dumps, by_name);
    int pairs = 0;
    for (size_t k = 0; k < ndumps; k++) {
        char text[1024];
        size_t stem = strlen(dumps[k]) - (dumps[k][strlen(dumps[k]) - 1] == 'z' ? 6 : 3);
        snprintf(text, sizeof text, "%.*s", (int)stem, dumps[k]);
        if (access(text, R_OK) != 0) {
            snprintf(text, sizeof text, "%.*s.gz", (int)stem, dumps[k]);
            if (access(text, R_OK) != 0) continue;
        }
        t_case("pb-9 %s equals its text dump", dumps[k]);
        hlo_module *a = read_text(text), *b = read_text(dumps[k]);
        if (a && b) {
            CHECK_MSG(align_computations(a, b), "the two forms name different computations");
            /* A jax 0.12 text dump elides get-tuple-elements ("t#N"): then the
             * two forms are compared value by value. */
            bool elides = false;
            for (uint32_t c = 0; c < a->ncomps; c++)
                for (uint32_t i = 0; i < a->comps[c].ninstrs && !elides; i++) elides = strchr(a->comps[c].instrs[i].name, '#');
            if (!elides) equal(a, b, GEQ_IGNORE_HEADER | GEQ_ELIDED_MATCHES);
            for (uint32_t c = 0; elides && c < a->ncomps && c < b->ncomps; c++) {
                strbuf why;
                sb_init(&why);
                CHECK_MSG(same_values(&a->comps[c], &b->comps[c], &why), "%s", why.s ? why.s : "");
                sb_free(&why);
            }
            pairs++;
        }
        graph_free(a);
        graph_free(b);
    }
    for (size_t k = 0; k < ndumps; k++) free(dumps[k]);
    free(dumps);
    if (pairs == 0) printf("note: no samples/**/*.hlo.pb next to its .hlo; real dumps were not compared\n");
    else printf("note: %d protobuf dumps compared with their text dumps\n", pairs);
}

/* ---- shardings by mesh axes (OpSharding.named_sharding) ---- */

static Xla__AxisRefProto *axis_ref(int64_t axis, int64_t pre, int64_t size) {
    Xla__AxisRefProto *a = xcalloc(1, sizeof *a);
    xla__axis_ref_proto__init(a);
    a->mesh_axis_index = axis;
    if (size) {
        a->sub_axis_info = xcalloc(1, sizeof *a->sub_axis_info);
        xla__axis_ref_proto__sub_axis__init(a->sub_axis_info);
        a->sub_axis_info->pre_size = pre;
        a->sub_axis_info->size = size;
    }
    return a;
}

static void free_axis_refs(Xla__AxisRefProto **v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(v[i]->sub_axis_info);
        free(v[i]);
    }
}

/* The text reader and the protobuf reader give the same (raw) sharding, never
 * a replicated one: a named sharding says nothing in OpSharding.type. */
static void named_shardings(void) {
    Xla__MeshProto__MeshAxis ax[4];
    Xla__MeshProto__MeshAxis *axp[4];
    const char *names[] = {"a", "b", "c", "d"};
    int64_t sizes[] = {2, 4, 3, 8};
    for (int i = 0; i < 4; i++) {
        xla__mesh_proto__mesh_axis__init(&ax[i]);
        ax[i].name = (char *)names[i];
        ax[i].size = sizes[i];
        axp[i] = &ax[i];
    }
    Xla__MeshProto mesh4 = XLA__MESH_PROTO__INIT, mesh2 = XLA__MESH_PROTO__INIT, one = XLA__MESH_PROTO__INIT;
    mesh4.n_axes = 4;
    mesh4.axes = axp;
    mesh2.n_axes = 2;
    mesh2.axes = axp;
    int64_t five[] = {5};
    one.n_device_ids = 1;
    one.device_ids = five;
    /* [{'a'}, {'c', 'b'}] */
    Xla__AxisRefProto *d0[] = {axis_ref(0, 0, 0)}, *d1[] = {axis_ref(2, 0, 0), axis_ref(1, 0, 0)};
    Xla__NamedShardingProto__DimensionSharding ds[2];
    Xla__NamedShardingProto__DimensionSharding *dsp[] = {&ds[0], &ds[1]};
    for (int i = 0; i < 2; i++) {
        xla__named_sharding_proto__dimension_sharding__init(&ds[i]);
        ds[i].is_closed = true;
    }
    ds[0].n_axes = 1;
    ds[0].axes = d0;
    ds[1].n_axes = 2;
    ds[1].axes = d1;
    /* [{'b':(2)2}, {'d':(4)2, 'c', ?}], replicated={'a'}, unreduced=max{'d':(2)2} */
    Xla__AxisRefProto *e0[] = {axis_ref(1, 2, 2)}, *e1[] = {axis_ref(3, 4, 2), axis_ref(2, 0, 0)};
    Xla__AxisRefProto *rep[] = {axis_ref(0, 0, 0)}, *unr[] = {axis_ref(3, 2, 2)}, *all2[] = {axis_ref(0, 0, 0),
                                                                                           axis_ref(1, 0, 0)};
    Xla__NamedShardingProto__DimensionSharding es[2];
    Xla__NamedShardingProto__DimensionSharding *esp[] = {&es[0], &es[1]};
    for (int i = 0; i < 2; i++) xla__named_sharding_proto__dimension_sharding__init(&es[i]);
    es[0].is_closed = true;
    es[0].n_axes = 1;
    es[0].axes = e0;
    es[1].n_axes = 2;
    es[1].axes = e1;
    Xla__NamedShardingProto ns[5];
    for (int i = 0; i < 5; i++) xla__named_sharding_proto__init(&ns[i]);
    ns[0].mesh = &mesh4;
    ns[0].n_dim_shardings = 2;
    ns[0].dim_shardings = dsp;
    ns[1].mesh = &mesh4;
    ns[1].n_dim_shardings = 2;
    ns[1].dim_shardings = esp;
    ns[1].n_replicated_axes = 1;
    ns[1].replicated_axes = rep;
    ns[1].n_unreduced_axes = 1;
    ns[1].unreduced_axes = unr;
    ns[1].reduction_op = XLA__NAMED_SHARDING_PROTO__REDUCTION_OP_PROTO__MAX;
    ns[2].mesh = &mesh2;
    ns[3].mesh = &one;
    ns[4].mesh = &mesh2;
    ns[4].n_manual_axes = 2;
    ns[4].manual_axes = all2;
    const char *want[] = {
        "{mesh['a'=2,'b'=4,'c'=3,'d'=8], [{'a'}, {'c', 'b'}]}",
        "{mesh['a'=2,'b'=4,'c'=3,'d'=8], [{'b':(2)2}, {'d':(4)2, 'c', ?}], replicated={'a'}, unreduced=max{'d':(2)2}}",
        "{mesh['a'=2,'b'=4], replicated}",
        "{maximal_mesh[device_id=5]}",
        "{mesh['a'=2,'b'=4], manual}",
    };
    Xla__OpSharding os[5];
    Xla__HloInstructionProto *v[5];
    char nm[5][4];
    for (int i = 0; i < 5; i++) {
        xla__op_sharding__init(&os[i]);
        os[i].named_sharding = &ns[i];
        snprintf(nm[i], sizeof nm[i], "p%d", i);
        v[i] = instr(nm[i], "parameter", DT_F32, 20 + i);
        v[i]->parameter_number = i;
        v[i]->sharding = &os[i];
    }
    strbuf b = pack(v, 5);
    hlo_module *m = parse_ok(&b);
    strbuf text;
    sb_init(&text);
    sb_puts(&text, "HloModule hand\nENTRY main {\n");
    for (int i = 0; i < 5; i++) sb_printf(&text, "  p%d = f32[] parameter(%d), sharding=%s\n", i, i, want[i]);
    sb_puts(&text, "}\n");
    diag d;
    diag_init(&d, "hand.hlo");
    hlo_module *t = hlo_parse_text(text.s, text.len, "hand.hlo", &d);
    CHECK_MSG(t != NULL, "%s", d.out.s ? d.out.s : "");
    for (int i = 0; m && t && i < 5; i++) {
        t_case("pb-12 named sharding %s", want[i]);
        const hlo_instr *in = &m->comps[0].instrs[i];
        const hlo_attr *a = instr_attr(in, A_SHARDING), *ta = instr_attr(&t->comps[0].instrs[i], A_SHARDING);
        if (!CHECK(a && ta)) continue;
        CHECK_EQ(a->v.sharding->type, SH_RAW);
        strbuf got;
        sb_init(&got);
        hlo_print_attr_value(&got, m, &m->comps[0], in, a);
        CHECK_STR(got.s, want[i]);
        CHECK(hlo_attr_equal(a, ta));
        sb_free(&got);
    }
    graph_free(m);
    graph_free(t);
    diag_free(&d);
    sb_free(&text);
    sb_free(&b);
    for (int i = 0; i < 5; i++) free_instr(v[i]);
    free_axis_refs(d0, 1);
    free_axis_refs(d1, 2);
    free_axis_refs(e0, 1);
    free_axis_refs(e1, 2);
    free_axis_refs(rep, 1);
    free_axis_refs(unr, 1);
    free_axis_refs(all2, 2);
}

/* order= (HloInstructionProto.comparison_order 102) reads as the text has
 * it: written only when not the operand type's default. */
static void comparison_order(void) {
    Xla__HloInstructionProto *pf = instr("pf", "parameter", DT_F32, 1), *pi = instr("pi", "parameter", DT_S32, 2);
    pi->parameter_number = 1;
    Xla__HloInstructionProto *cf = instr("cf", "compare", DT_PRED, 3), *cp = instr("cp", "compare", DT_PRED, 4),
                             *ci = instr("ci", "compare", DT_PRED, 5), *cj = instr("cj", "compare", DT_PRED, 6);
    int64_t ff[] = {1, 1}, ii[] = {2, 2};
    Xla__HloInstructionProto *cmp[] = {cf, cp, ci, cj};
    const char *orders[] = {"TOTAL", "PARTIAL", "TOTAL", "PARTIAL"};
    for (int k = 0; k < 4; k++) {
        cmp[k]->n_operand_ids = 2;
        cmp[k]->operand_ids = k < 2 ? ff : ii;
        cmp[k]->comparison_direction = "LT";
        cmp[k]->comparison_order = (char *)orders[k];
    }
    Xla__HloInstructionProto *v[] = {pf, pi, cf, cp, ci, cj};
    strbuf b = pack(v, 6);
    hlo_module *m = parse_ok(&b);
    diag d;
    diag_init(&d, "o.hlo");
    const char *text = "HloModule hand\nENTRY main {\n  pf = f32[] parameter(0)\n  pi = s32[] parameter(1)\n"
                       "  cf = pred[] compare(pf, pf), direction=LT, order=TOTAL\n"
                       "  cp = pred[] compare(pf, pf), direction=LT\n"
                       "  ci = pred[] compare(pi, pi), direction=LT\n"
                       "  ROOT cj = pred[] compare(pi, pi), direction=LT, order=PARTIAL\n}\n";
    hlo_module *t = hlo_parse_text(text, strlen(text), "o.hlo", &d);
    t_case("pb-13 compare order= where it is not the operand type's default");
    if (CHECK(m && t)) {
        for (int k = 2; k < 6; k++) {
            const hlo_instr *a = &m->comps[0].instrs[k], *ta = &t->comps[0].instrs[k];
            CHECK_MSG(a->nattrs == ta->nattrs, "%s: %u vs %u attributes", a->name, a->nattrs, ta->nattrs);
            for (uint32_t j = 0; j < a->nattrs && a->nattrs == ta->nattrs; j++)
                CHECK_MSG(hlo_attr_equal(&a->attrs[j], &ta->attrs[j]), "%s: attribute %u", a->name, j);
        }
    }
    graph_free(m);
    graph_free(t);
    diag_free(&d);
    sb_free(&b);
    for (int k = 0; k < 6; k++) free_instr(v[k]);
}

/* ---- jax 0.12 dumps: elided get-tuple-elements ---- */

/* The value instruction i of c stands for: its name, or for a
 * get-tuple-element "KEY(tuple)#N" (what a text dump writes when it elides
 * the instruction). memo[i] caches the answer (caller frees). */
static const char *value_key(const hlo_comp *c, uint32_t i, char **memo) {
    if (memo[i]) return memo[i];
    const hlo_instr *in = &c->instrs[i];
    strbuf b;
    sb_init(&b);
    if (in->op == OP_GET_TUPLE_ELEMENT && in->noperands == 1)
        sb_printf(&b, "%s#%lld", value_key(c, in->operands[0], memo), (long long)instr_int(in, A_INDEX, 0));
    else
        sb_puts(&b, in->name);
    return memo[i] = sb_take(&b);
}

static bool same_meta(const hlo_instr *x, const hlo_instr *y) {
    static const hlo_meta none;
    const hlo_meta *a = x->meta ? x->meta : &none, *b = y->meta ? y->meta : &none;
    return !strcmp(x->op_name ? x->op_name : "", y->op_name ? y->op_name : "") &&
           !strcmp(a->op_type ? a->op_type : "", b->op_type ? b->op_type : "") &&
           !strcmp(a->source_file ? a->source_file : "", b->source_file ? b->source_file : "") &&
           a->source_line == b->source_line && a->source_column == b->source_column &&
           a->stack_frame_id == b->stack_frame_id;
}

/* Computation c of text module a against the same computation of protobuf
 * module b, value by value: every instruction that is not a get-tuple-element
 * has a namesake with the same opcode, shape, operand values, attributes and
 * metadata; both read the same set of tuple elements, with the same shapes;
 * the roots are the same value. The text may elide get-tuple-elements (then
 * named "t#N", without metadata), so those are matched by value, not name. */
static bool same_values(const hlo_comp *ca, const hlo_comp *cb, strbuf *why) {
    char **ka = xcalloc(ca->ninstrs + 1, sizeof *ka), **kb = xcalloc(cb->ninstrs + 1, sizeof *kb);
    strmap byname, elems, seen;
    strmap_init(&byname);
    strmap_init(&elems);
    strmap_init(&seen);
    bool ok = true;
    uint32_t na = 0, nb = 0;
    for (uint32_t i = 0; i < cb->ninstrs; i++) {
        const char *k = value_key(cb, i, kb);
        if (cb->instrs[i].op == OP_GET_TUPLE_ELEMENT) strmap_put(&elems, k, strlen(k), i);
        else {
            strmap_put(&byname, k, strlen(k), i);
            nb++;
        }
    }
    size_t eb = elems.len;
    for (uint32_t i = 0; i < ca->ninstrs && ok; i++) {
        const hlo_instr *ia = &ca->instrs[i];
        const char *k = value_key(ca, i, ka);
        uint32_t j;
        bool gte = ia->op == OP_GET_TUPLE_ELEMENT;
        if (!strmap_get(gte ? &elems : &byname, k, strlen(k), &j)) {
            sb_printf(why, "%s: %s has no counterpart", ca->name, k);
            ok = false;
            break;
        }
        const hlo_instr *ib = &cb->instrs[j];
        if (gte) {
            strmap_put(&seen, k, strlen(k), i);
            ok = shape_equal(&ia->shape, &ib->shape) && (strchr(ia->name, '#') || same_meta(ia, ib));
            if (!ok) sb_printf(why, "%s: element %s differs in shape or metadata", ca->name, k);
            continue;
        }
        na++;
        ok = ia->op == ib->op && !strcmp(ia->opname, ib->opname) && shape_equal(&ia->shape, &ib->shape) &&
             ia->noperands == ib->noperands && ia->nattrs == ib->nattrs && same_meta(ia, ib);
        for (uint32_t o = 0; ok && o < ia->noperands; o++)
            ok = !strcmp(value_key(ca, ia->operands[o], ka), value_key(cb, ib->operands[o], kb));
        for (uint32_t t = 0; ok && t < ia->nattrs; t++)
            ok = ia->attrs[t].kind == K_INSTRS ? ia->attrs[t].n == ib->attrs[t].n
                                               : hlo_attr_equal(&ia->attrs[t], &ib->attrs[t]);
        if (!ok) sb_printf(why, "%s: %s differs (opcode, shape, operands, attributes or metadata)", ca->name, k);
    }
    /* the same elements (a text dump reads each once), the same roots */
    if (ok && (na != nb || seen.len != eb)) {
        sb_printf(why, "%s: %u/%u instructions and %zu/%zu tuple elements", ca->name, na, nb, seen.len, eb);
        ok = false;
    }
    if (ok && strcmp(value_key(ca, ca->root, ka), value_key(cb, cb->root, kb))) {
        sb_printf(why, "%s: roots differ", ca->name);
        ok = false;
    }
    for (uint32_t i = 0; i < ca->ninstrs; i++) free(ka[i]);
    for (uint32_t i = 0; i < cb->ninstrs; i++) free(kb[i]);
    free(ka);
    free(kb);
    strmap_free(&byname);
    strmap_free(&elems);
    strmap_free(&seen);
    return ok;
}

/* tests/cases/jax012: each module's text and protobuf dumps (jax 0.12 writes
 * "%t#N" in pass dumps) read to the same instructions, operands, shapes,
 * attributes (shardings included) and metadata, and to the same mesh. */
static void jax012_pairs(void) {
    static const char *const stems[] = {
        "gspmd_adamw.baseline", "gspmd_adamw.dist", "gspmd_scan.baseline", "gspmd_scan.dist", "gspmd_scan_prop.baseline", "gspmd_scan_prop.dist",
        "mesh_b1m4.baseline", "mesh_b1m4.dist", "mesh_d4m1.baseline", "mesh_d4m1.dist",
        "smap_sgd.baseline", "smap_sgd.dist", "smap_sgd_x4.dist",
    };
    int elided = 0;
    for (size_t k = 0; k < sizeof stems / sizeof *stems; k++) {
        char tp[256], pp[256];
        snprintf(tp, sizeof tp, "tests/cases/jax012/%s.hlo", stems[k]);
        snprintf(pp, sizeof pp, "tests/cases/jax012/%s.hlo.pb", stems[k]);
        t_case("pb-10 jax 0.12 %s: text and protobuf read alike", stems[k]);
        hlo_module *a = read_text(tp), *b = read_text(pp);
        if (a && b && CHECK_MSG(align_computations(a, b), "the two forms name different computations")) {
            CHECK_EQ(a->entry, b->entry);
            CHECK_EQ(graph_num_devices(a), graph_num_devices(b));
            /* the header attributes the protobuf carries read as the text has them */
            static const char *const keys[] = {"frontend_attributes", "num_partitions"};
            for (int h = 0; h < 2; h++) {
                const char *va = NULL, *vb = NULL;
                for (uint32_t i = 0; i < a->nattrs; i++)
                    if (!strcmp(a->attrs[i].raw_key, keys[h])) va = a->attrs[i].v.str;
                for (uint32_t i = 0; i < b->nattrs; i++)
                    if (!strcmp(b->attrs[i].raw_key, keys[h])) vb = b->attrs[i].v.str;
                CHECK_STR(vb ? vb : "(none)", va ? va : "(none)");
            }
            CHECK(a->nframes == b->nframes && a->nfile_locs == b->nfile_locs);
            for (uint32_t c = 0; c < a->ncomps; c++) {
                strbuf why;
                sb_init(&why);
                CHECK_MSG(same_values(&a->comps[c], &b->comps[c], &why), "%s", why.s ? why.s : "");
                sb_free(&why);
                for (uint32_t i = 0; i < a->comps[c].ninstrs; i++)
                    elided += strchr(a->comps[c].instrs[i].name, '#') != NULL;
            }
        }
        graph_free(a);
        graph_free(b);
    }
    t_case("pb-10 the jax 0.12 text dumps elide get-tuple-elements");
    CHECK(elided >= 8);
}

/* The relations --auto-relations derives from one form of a GSPMD pair, as
 * text: the mesh, then every input and output view (or the error). */
static char *auto_relations(const char *stem, const char *ext) {
    char bp[256], dp[256];
    snprintf(bp, sizeof bp, "tests/cases/jax012/%s.baseline.%s", stem, ext);
    snprintf(dp, sizeof dp, "tests/cases/jax012/%s.dist.%s", stem, ext);
    hlo_module *b = read_text(bp), *dm = read_text(dp);
    strbuf out;
    sb_init(&out);
    if (b && dm) {
        diag d;
        diag_init(&d, bp);
        relations r;
        if (relations_auto(b, graph_num_devices(dm), &r, &d)) {
            mesh_print(&out, &r.mesh);
            for (uint32_t i = 0; i < r.ninputs; i++) {
                sb_puts(&out, " | ");
                view_print(&out, &r.inputs[i], &r.mesh);
            }
            sb_puts(&out, " ->");
            for (uint32_t i = 0; i < r.noutputs; i++) {
                sb_puts(&out, " | ");
                view_print(&out, &r.outputs[i], &r.mesh);
            }
            relations_free(&r);
        } else {
            sb_printf(&out, "error: %s", d.out.s ? d.out.s : "");
        }
        diag_free(&d);
    }
    graph_free(b);
    graph_free(dm);
    return sb_take(&out);
}

/* Meshes with a size-1 axis: the protobuf baseline carries the Shardy mesh in
 * HloModuleProto.frontend_attributes and the partitioned module its partition
 * count in device_assignment, so both forms give one mesh, size-1 axes kept. */
static void jax012_meshes(void) {
    static const struct { const char *stem, *mesh; } pairs[] = {
        {"mesh_d4m1", "{data:4, model:1}"},
        {"mesh_b1m4", "{batch:1, model:4}"},
        {"gspmd_adamw", "{data:2, model:4}"},
        {"gspmd_scan", "{data:2, model:4}"},
    };
    for (size_t k = 0; k < sizeof pairs / sizeof *pairs; k++) {
        t_case("pb-11 %s: both forms give the mesh %s and the same relations", pairs[k].stem, pairs[k].mesh);
        char *t = auto_relations(pairs[k].stem, "hlo"), *p = auto_relations(pairs[k].stem, "hlo.pb");
        CHECK_STR(p, t);
        CHECK_MSG(strncmp(t, pairs[k].mesh, strlen(pairs[k].mesh)) == 0, "%s", t);
        free(t);
        free(p);
    }
    t_case("pb-11 the partitioned protobuf module says how many partitions it has");
    hlo_module *a = read_text("tests/cases/jax012/mesh_d4m1.dist.hlo"),
               *b = read_text("tests/cases/jax012/mesh_d4m1.dist.hlo.pb");
    if (a && b) {
        CHECK_EQ(graph_num_devices(a), 4);
        CHECK_EQ(graph_num_devices(b), 4);
    }
    graph_free(a);
    graph_free(b);
}

void suite_pb(void);
void suite_pb(void) {
    round_trips();
    containers();
    hostile();
    wire_errors();
    one_pass_edges();
    conversion();
    fields();
    collectives();
    order();
    sample_pairs();
    named_shardings();
    comparison_order();
    jax012_pairs();
    jax012_meshes();
}
