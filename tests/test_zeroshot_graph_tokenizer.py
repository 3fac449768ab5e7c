"""The tokenizer as TensorFlow ops (`vit_keras.zeroshot.graph_tokenizer`) against the `tokenizers` library it
replaces inside a SavedModel. Token ids are integers: every comparison is exact.

The reference is `vit_keras.zeroshot.tokenizer.Tokenizer`, whose ids the zero-shot tests hold equal to
transformers' (the three checkpoint tokenizers); the held-out pipelines here are built and trained with the
`tokenizers` library to reach the parts the checkpoints do not (unknown tokens without byte fallback, Unigram byte
fallback, the other Split behaviours, ByteLevel's whitespace runs, left padding, Bert's post-processor)."""

import json
import os
import unicodedata
import warnings

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
tokenizers = pytest.importorskip("tokenizers")

from tests import zeroshot_cases as cases  # noqa: E402
from vit_keras.zeroshot.graph_tokenizer import (  # noqa: E402
    GraphTokenizer,
    UnsupportedPipeline,
    nfc_changes_patterns,
    translate_regex,
)
from vit_keras.zeroshot.tokenizer import Tokenizer  # noqa: E402

# Characters from the scripts, spaces, marks and symbols that change how text is cut: ASCII letters and digits
# (weighted up), whitespace of several kinds, punctuation, accented Latin, Greek (Σ: TensorFlow's whole-string
# lowercasing would make a final ς), Cyrillic, CJK, emoji with modifiers, letter-like symbols, Devanagari and Bengali
# vowel signs (marks that NFC leaves alone).
POOL = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") * 3 + [" "] * 30
        + list("\t\n\u00a0\u2003\u3000") + list(".,;:!?'\"-_()[]{}<>/@#$%^&*+=~`|\\")
        + list("àáâãäåçèéêëìíîïñòóôõöùúûüýÿÀÉÎÕÜßøæœ") + list("αβγδεζηθικλμνξοπρστυφχψωΑΒΓΔΣΩ")
        + list("абвгдежзийклмнопрстуфхцчшщъыьэюяАБВЖЯ") + list("日本語中文字漢字한국어ひらがなカタカナ")
        + ["🐱", "🐶", "👍🏽", "❤️", "🇯🇵"] + list("ⅫⒶ①²½ﬁ") + list("कखगघािीुूेैोौ्ক্ষাত"))
EDGE_TEXTS = ["", " ", "a", "Hello,   World!! 123 4567", "it's they're we've I'm you'll he'd", "ΟΔΟΣ Σ σ",
              "İstanbul", "tab\tand\nnewline", "  leading and trailing  ", "a" * 200, "photo of a cat " * 20,
              "x-ray: 50% off; (maybe) [yes] {no} <tag> #hash", "ﬁve ligature", "Ⓐ circled", "under_score",
              "''quoted''", "Straße", "\u00a0nbsp\u2003em", "two  spaces   three    four",
              # the checkpoints' special tokens written in a text: the library cuts them out as those tokens
              "<|startoftext|>a photo<|endoftext|> of", "x </s> y <pad><unk>", "<bos>hi<eos> <mask>",
              "</s>", "  <|endoftext|>  "]


def random_texts(count, seed=0):
    rng = np.random.default_rng(seed)
    texts = ["".join(rng.choice(POOL, size=rng.integers(0, 40))) for _ in range(count)]
    return [unicodedata.normalize("NFC", text) for text in texts]


def assert_same(tokenizer, texts):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # texts longer than the context: the truncation warning
        ids, mask = tokenizer(texts)
    graph_ids, graph_mask = (t.numpy() for t in GraphTokenizer.from_tokenizer(tokenizer)(tf.constant(texts)))
    wrong = [i for i in range(len(texts)) if not (ids[i] == graph_ids[i]).all()]
    assert not wrong, [(texts[i], ids[i].tolist(), graph_ids[i].tolist()) for i in wrong[:3]]
    if mask is not None:
        np.testing.assert_array_equal(graph_mask, mask)


@pytest.mark.parametrize("case", ["clip", "siglip", "siglip2"])
@pytest.mark.parametrize("context", [16, 64])
def test_checkpoint_tokenizers_give_the_librarys_ids(case, context):
    tokenizer = Tokenizer.from_directory(os.path.join(cases.case_dir(case), "checkpoint"), context_length=context,
                                         family=case)
    assert_same(tokenizer, cases.texts(case) + EDGE_TEXTS + random_texts(300))


def test_the_graph_gives_the_reference_cases_token_ids():
    for case in ("clip", "siglip", "siglip2"):
        directory = cases.case_dir(case)
        tokenizer = Tokenizer.from_directory(os.path.join(directory, "checkpoint"), context_length=16, family=case)
        ids, mask = GraphTokenizer.from_tokenizer(tokenizer)(tf.constant(cases.texts(case)))
        np.testing.assert_array_equal(ids.numpy(), np.load(os.path.join(directory, "token_ids.npy")))
        if case != "siglip":  # SigLIP's tokenizer gives no mask
            np.testing.assert_array_equal(mask.numpy(), np.load(os.path.join(directory, "attention_mask.npy")))


CORPUS = ["a photo of a cat", "a photo of a dog", "two cats on a sofa", "the red car is parked outside",
          "A Photo Of The Sea!", "don't stop, it's 42 degrees", "naïve café crème brûlée", "日本の猫"] * 4


def _trained(model, trainer, normalizer=None, pre_tokenizer=None, post_processor=None):
    backend = tokenizers.Tokenizer(model)
    if normalizer is not None:
        backend.normalizer = normalizer
    if pre_tokenizer is not None:
        backend.pre_tokenizer = pre_tokenizer
    backend.train_from_iterator(CORPUS, trainer)
    if post_processor is not None:
        backend.post_processor = post_processor(backend)
    return backend


def _with_byte_tokens(backend, **model_fields):
    """The trained tokenizer with the 256 byte tokens `<0x00>`..`<0xFF>` in its vocabulary and `model_fields` set."""
    spec = json.loads(backend.to_str())
    vocab = spec["model"]["vocab"]
    names = [f"<0x{byte:02X}>" for byte in range(256)]
    if isinstance(vocab, dict):
        for name in names:
            vocab.setdefault(name, len(vocab))
    else:
        vocab.extend([name, -20.0] for name in names)
    spec["model"].update(model_fields)
    return tokenizers.Tokenizer.from_str(json.dumps(spec))


def _pipelines():
    n, p, m = tokenizers.normalizers, tokenizers.pre_tokenizers, tokenizers.models
    t, post = tokenizers.trainers, tokenizers.processors
    specials = ["<pad>", "<unk>", "<s>", "</s>"]
    bert = lambda b: post.BertProcessing(("</s>", b.token_to_id("</s>")), ("<s>", b.token_to_id("<s>")))  # noqa: E731
    template = lambda b: post.TemplateProcessing(single="<s> $A </s>",  # noqa: E731
                                                 special_tokens=[("<s>", b.token_to_id("<s>")),
                                                                 ("</s>", b.token_to_id("</s>"))])
    return {
        # BPE without byte fallback: characters outside the vocabulary become <unk>, runs of them fused
        "bpe-unk-fused": (_trained(m.BPE(unk_token="<unk>", fuse_unk=True), t.BpeTrainer(
            vocab_size=120, special_tokens=specials), n.Lowercase(), p.Split(" ", "removed")), "right"),
        "bpe-unk-isolated-left-pad": (_trained(m.BPE(unk_token="<unk>", fuse_unk=False), t.BpeTrainer(
            vocab_size=90, special_tokens=specials), n.Sequence([n.Strip(), n.Replace("  ", " ")]),
            p.Split(tokenizers.Regex(r"\d+|[^\w\s]"), "isolated"), template), "left"),
        "bpe-merged-with-previous": (_trained(m.BPE(unk_token="<unk>"), t.BpeTrainer(
            vocab_size=150, special_tokens=specials), None,
            p.Split(tokenizers.Regex(r"\s"), "merged_with_previous"), bert), "right"),
        "bpe-merged-with-next": (_trained(m.BPE(unk_token="<unk>"), t.BpeTrainer(
            vocab_size=150, special_tokens=specials), n.Prepend("\u2581"),
            p.Split(tokenizers.Regex(r"\s+"), "merged_with_next"), None), "right"),
        # ByteLevel with its own GPT-2 split and a prefix space: whitespace runs reach the lookahead rule
        "byte-level-gpt2": (_trained(m.BPE(), t.BpeTrainer(vocab_size=300, special_tokens=specials,
                                                           initial_alphabet=p.ByteLevel.alphabet()),
                                     None, p.ByteLevel(add_prefix_space=True, use_regex=True), template), "right"),
        # Unigram with a Metaspace that prepends to the first piece only and does not split
        "unigram-first-nosplit": (_trained(m.Unigram(), t.UnigramTrainer(
            vocab_size=100, special_tokens=specials, unk_token="<unk>"), n.Lowercase(),
            p.Metaspace(prepend_scheme="first", split=False), template), "right"),
    }


@pytest.mark.parametrize("name", sorted(_pipelines()))
def test_held_out_pipelines_give_the_librarys_ids(name):
    backend, side = _pipelines()[name]
    tokenizer = Tokenizer(backend, context_length=24, pad_token="<pad>", padding_side=side, source=name)
    assert_same(tokenizer, CORPUS[:8] + EDGE_TEXTS + random_texts(150, seed=1))


def test_added_tokens_are_cut_out_as_the_library_does():
    # A token matched on the raw text, one matched after the normaliser (upper case in a text still matches it after
    # lowercasing), both with Metaspace's "first" scheme, which prepends only where the text begins.
    n, p, m, t = tokenizers.normalizers, tokenizers.pre_tokenizers, tokenizers.models, tokenizers.trainers
    backend = _trained(m.Unigram(), t.UnigramTrainer(vocab_size=100, special_tokens=["<pad>", "<unk>"],
                                                     unk_token="<unk>"), n.Lowercase(),
                       p.Metaspace(prepend_scheme="first"))
    backend.add_special_tokens([tokenizers.AddedToken("[IMG]", normalized=False)])
    backend.add_tokens([tokenizers.AddedToken("red car", normalized=True)])
    tokenizer = Tokenizer(backend, context_length=32, pad_token="<pad>", source="added")
    assert_same(tokenizer, ["[IMG] a photo", "a [IMG][IMG]photo", "A RED CAR here", "red car", "x red carred car",
                            "[img] is text", "", "[IMG]"] + CORPUS[:4])


def test_an_added_token_with_matching_rules_is_refused_in_a_text():
    backend = tokenizers.Tokenizer.from_str(_clip().backend.to_str())
    backend.add_special_tokens([tokenizers.AddedToken("<mask>", lstrip=True)])
    graph = GraphTokenizer.from_tokenizer(Tokenizer(backend, context_length=16, pad_token="<|endoftext|>"))
    graph(tf.constant(["a photo of a cat"]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="lstrip, rstrip, single_word"):
        graph(tf.constant(["a photo of a <mask>"]))


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_byte_fallback_gives_the_librarys_ids(kind):
    n, p, m, t = tokenizers.normalizers, tokenizers.pre_tokenizers, tokenizers.models, tokenizers.trainers
    if kind == "bpe":
        backend = _trained(m.BPE(unk_token="<unk>"), t.BpeTrainer(vocab_size=100, special_tokens=["<pad>", "<unk>"]),
                           n.Replace(" ", "\u2581"), None)
    else:
        backend = _trained(m.Unigram(), t.UnigramTrainer(vocab_size=80, special_tokens=["<pad>", "<unk>"],
                                                         unk_token="<unk>"), None, p.Metaspace())
    backend = _with_byte_tokens(backend, byte_fallback=True)
    tokenizer = Tokenizer(backend, context_length=48, pad_token="<pad>", source=kind)
    assert_same(tokenizer, CORPUS[:8] + EDGE_TEXTS + random_texts(150, seed=2))


def _clip():
    return Tokenizer.from_directory(os.path.join(cases.case_dir("clip"), "checkpoint"), context_length=16,
                                    family="clip")


def test_text_that_nfc_would_change_is_refused_not_answered_differently():
    graph = GraphTokenizer.from_tokenizer(_clip())
    decomposed = unicodedata.normalize("NFD", "café")
    with pytest.raises(tf.errors.InvalidArgumentError, match="NFC"):
        graph(tf.constant(["a photo", decomposed]))
    # the same text in NFC, and NFC text with marks that compose with nothing before them, pass
    assert_same(_clip(), ["café", "n\u0308", "क\u093c", "কা"])


def test_the_nfc_check_misses_no_text_that_nfc_changes():
    # Mark-heavy random text (decomposed accents, Hebrew and Arabic points, Indic signs, Hangul jamo, characters
    # NFC replaces): every text NFC changes must be refused. Some NFC texts are refused too (the check is a superset;
    # measured 40 of 20,000 here), which costs a clear error, never a wrong id.
    rng = np.random.default_rng(3)
    pool = (list("aeiouAEIOUnNcCsSzZ ") + [chr(c) for c in range(0x300, 0x370)]
            + list("\u0323\u0328\u05b0\u05b4\u05bc\u05c1\u064e\u0651\u093c\u0915\u09be\u09c7\u0b47\u0b3e\u1100"
                   "\u1161\u11a8\uac00\u212b\u2126\uf900\u0958\u1e9b\u0340\u0344\u0f73")
            + [unicodedata.normalize("NFD", c) for c in "éèêëàâäôöûüçñÅ"])
    texts = ["".join(rng.choice(pool, size=rng.integers(1, 12))) for _ in range(5000)]
    found = tf.constant(texts)
    refused = np.any([tf.strings.regex_full_match(found, f"(?s).*(?:{pattern}).*").numpy()
                      for pattern in nfc_changes_patterns()], axis=0)
    changes = np.array([unicodedata.normalize("NFC", text) != text for text in texts])
    assert changes.sum() > 1000
    assert not (changes & ~refused).any(), [texts[i] for i in np.flatnonzero(changes & ~refused)[:3]]


@pytest.mark.parametrize("pattern", [r"\w", r"\s", r"\d", r"\W", r"[^\w\s]", r"[\d_]", r"\S",
                                     r"[^\s\p{L}\p{N}]"])
def test_unicode_escapes_match_the_library_on_every_code_point(pattern):
    points = [p for p in range(0x110000) if not 0xD800 <= p <= 0xDFFF]
    # the library's own split of one text holding every code point: what it leaves are the characters not matched
    # (one split, not one per code point: the pattern matches a single character, so no match depends on another)
    split = tokenizers.pre_tokenizers.Split(tokenizers.Regex(pattern), "removed")
    library = np.ones(len(points), bool)
    for _, (begin, end) in split.pre_tokenize_str("".join(map(chr, points))):
        library[begin:end] = False
    graph = tf.strings.regex_full_match(tf.constant([chr(p) for p in points]), translate_regex(pattern)).numpy()
    assert (graph == library).all(), [hex(points[i]) for i in np.flatnonzero(graph != library)[:10]]


@pytest.fixture(scope="module")
def family_graphs():
    """(Tokenizer, GraphTokenizer) of the CLIP and SigLIP 2 checkpoints (NFC and lowercase; lowercase only)."""
    tokenizers_ = {case: Tokenizer.from_directory(os.path.join(cases.case_dir(case), "checkpoint"), context_length=16,
                                                  family=case) for case in ("clip", "siglip", "siglip2")}
    return {case: (tokenizer, GraphTokenizer.from_tokenizer(tokenizer)) for case, tokenizer in tokenizers_.items()}


def test_nul_keeps_the_text_after_it_as_the_library_does(family_graphs):
    for tokenizer, _ in family_graphs.values():
        assert_same(tokenizer, ["a cat\x00", "a photo of a cat\x00 and a dog", "\x00", "A\x00B", "x \x00\x00 y"])


def _refused_naming(graph, text, point):
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"(?s)newer Unicode version.*U\\+{point:04X}\\b"):
        graph(tf.constant([text]))


# Letters of Unicode 14-16 (TensorFlow's ICU and Python's unicodedata 14.0 lack the later ones): the graph must
# refuse them where its tables differ from the library's, and give the library's ids where they do not.
NEW_LETTERS = {0xA7CB: "cased", 0xA7C0: "cased", 0x10570: "cased (Vithkuqi)", 0x10D50: "cased (Garay)",
               0x16D40: "uncased (Kirat Rai)", 0x11380: "uncased (Tulu-Tigalari)", 0x2EBF0: "uncased (CJK ext. I)"}


@pytest.mark.parametrize("case", ["clip", "siglip2"])
def test_letters_newer_than_tensorflows_unicode_are_refused_by_name_never_answered_differently(case, family_graphs):
    tokenizer, graph = family_graphs[case]
    for point, kind in NEW_LETTERS.items():
        text = f"a {chr(point)}x photo"
        # CLIP's NFC check is built from Python's tables, which lack all of them; SigLIP 2 only lowercases, so only
        # a cased letter's lowercase (ICU's tables against the library's) can differ
        if case == "clip" or kind.startswith("cased"):
            _refused_naming(graph, text, point)
        else:
            assert_same(tokenizer, [text])


@pytest.mark.parametrize("case", ["clip", "siglip", "siglip2"])
def test_random_text_from_every_plane_is_refused_or_given_the_librarys_ids(case, family_graphs):
    tokenizer, graph = family_graphs[case]
    rng = np.random.default_rng(5)
    # code points from the planes that hold characters (BMP, SMP, SIP, TIP, SSP), mixed with ASCII words
    planes = np.concatenate([rng.integers(start, start + 0x10000, count) for start, count in (
        (0, 3000), (0x10000, 3000), (0x20000, 3000), (0x30000, 500), (0xE0000, 500))])
    pool = [chr(p) for p in planes if not 0xD800 <= p <= 0xDFFF and p not in (0xFDD0, 0xFDD1, 0xFDD2)]
    texts = [unicodedata.normalize("NFC", "".join(rng.choice(pool, size=2)) + " a Cat " + rng.choice(pool))
             for _ in range(400)]
    unshared = [any(first <= ord(c) <= last for c in text for first, last in graph.unshared) for text in texts]
    for text in [text for text, refuse in zip(texts, unshared) if refuse][:5]:
        with pytest.raises(tf.errors.InvalidArgumentError, match="newer Unicode version"):
            graph(tf.constant([text]))
    taken = [text for text, refuse in zip(texts, unshared) if not refuse]
    assert len(taken) > 40, len(taken)
    assert_same(tokenizer, taken)


def test_invalid_utf8_is_refused_in_the_graph(family_graphs):
    _, graph = family_graphs["siglip2"]
    served = tf.function(graph, input_signature=[tf.TensorSpec([None], tf.string)])  # as a SavedModel signature
    with pytest.raises(tf.errors.InvalidArgumentError, match="not valid UTF-8"):
        served(tf.constant([b"a photo", b"a \xff\xfe cat"]))


def test_regex_translation_refuses_what_re2_cannot_run():
    for pattern in (r"\s+(?!\S)", r"(?<=a)b", r"(a)\1", r"[\W]"):
        with pytest.raises(UnsupportedPipeline):
            translate_regex(pattern)


def test_unsupported_parts_are_refused_by_name():
    spec = json.loads(_clip().backend.to_str())
    for part, value, name in (("normalizer", {"type": "Precompiled", "precompiled_charsmap": ""}, "Precompiled"),
                              ("pre_tokenizer", {"type": "Digits", "individual_digits": True}, "Digits"),
                              ("model", {"type": "WordPiece", "vocab": {"a": 0}}, "WordPiece")):
        with pytest.raises(UnsupportedPipeline, match=f"'{name}'.*strings=False"):
            GraphTokenizer({**spec, part: value}, context_length=16, pad_id=0)


def test_reserved_characters_are_refused():
    with pytest.raises(tf.errors.InvalidArgumentError, match="U\\+FDD0"):
        GraphTokenizer.from_tokenizer(_clip())(tf.constant(["a \ufdd0 b"]))


def test_texts_over_the_length_limit_are_refused():
    graph = GraphTokenizer.from_tokenizer(_clip(), max_text_length=20)
    graph(tf.constant(["a photo of a red car"]))  # 20 characters: taken
    with pytest.raises(tf.errors.InvalidArgumentError, match="longer than 20 characters.*max_text_length"):
        graph(tf.constant(["a photo of a red car!"]))
    with pytest.raises(ValueError, match="max_text_length must be a positive"):
        GraphTokenizer.from_tokenizer(_clip(), max_text_length=0)


def test_it_runs_in_a_tf_data_pipeline():
    tokenizer = _clip()
    graph = GraphTokenizer.from_tokenizer(tokenizer)
    texts = CORPUS[:8]
    batches = tf.data.Dataset.from_tensor_slices(texts).batch(3).map(graph)
    ids = np.concatenate([batch_ids.numpy() for batch_ids, _ in batches])
    np.testing.assert_array_equal(ids, tokenizer(texts)[0])
