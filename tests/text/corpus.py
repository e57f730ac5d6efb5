"""corpus.py - the deterministic tokenizer test corpus (issue 4, acceptance check 1).

corpus() returns a list of byte strings, the same on every run and machine: hand-written
samples of each category below, then random mixes of them drawn from a fixed seed.
Categories: English prose, code, numbers and dates, whitespace runs / tabs / newlines, CJK,
emoji with ZWJ sequences, combining marks, RTL scripts, strings that look like special
tokens, invalid UTF-8, control characters and a few long strings.

Run as a script it prints the corpus as hex, one string per line (m40-tokenize --batch
input), or with --stats the count per category.
"""
import random
import sys

PROSE = [
    "Once upon a time, there was a little girl named Lily.",
    "She loved to play outside in the sunshine with her dog, Max.",
    "The quick brown fox jumps over the lazy dog.",
    "It's a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.",
    "I'm sure you'll agree: we've done what we'd planned, and they're happy.",
    "DON'T SHOUT! I'M RIGHT HERE. YOU'RE TOO LOUD. WE'VE HEARD. THEY'LL COME. HE'D KNOW.",
    "Mr. Smith went to Washington, D.C., on Jan. 5th; he didn't return.",
    "\"Hello,\" she said. 'Goodbye,' he replied... (Well?) [Maybe!] {Sure.}",
    "The café served naïve crème brûlée to the über-rich señor from São Paulo.",
    "Wait -- what? No -- that's not it... or is it?!",
    "A man, a plan, a canal: Panama.",
    "To be, or not to be: that is the question.",
    "Ask not what your country can do for you; ask what you can do for your country.",
    "The end.",
    "Hello world",
    "hello",
    "HELLO",
    "Hello, World! How are you doing today?",
    "e-mail me at john.doe@example.com or visit https://example.org/path?q=1&r=2#frag",
    "Prices rose 3.5% in Q3 — the highest since '08.",
    "She said \u201cyes\u201d and he said \u2018no\u2019 \u2026 then they laughed.",
    "Tom's dog's bone's gone. The kids' toys' boxes.",
    "rock'n'roll isn't dead; y'all know it ain't.",
    "Once upon a time in a land far far away there lived a king who had three daughters",
    "Their, there, they're. Its, it's. Your, you're.",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua.",
]

CODE = [
    "int main(int argc, char **argv) {\n\treturn 0;\n}\n",
    "def f(x):\n    return x ** 2  # square\n",
    "for (size_t i = 0; i < n; i++) { a[i] += b[i] * 2.0f; }",
    "if __name__ == '__main__':\n    main()\n",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
    "<html><body><p class=\"x\">Hi &amp; bye</p></body></html>",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
    "#include <stdio.h>\n#define MAX(a, b) ((a) > (b) ? (a) : (b))\n",
    "const x = (a, b) => a?.b ?? c || d && !e;",
    "git commit -m \"fix: handle EOF\" && git push origin main",
    "ls -la | grep '^d' | awk '{print $9}' > dirs.txt 2>&1",
    "x = [i for i in range(10) if i % 2 == 0]",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "    indented by four\n        by eight\n\t\ttabs\n",
    "a=1;b=2;c=a+b;print(c)",
    "/* comment */ // another\n/** doc */",
    "regex: ^[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\\.[A-Za-z]{2,}$",
    "template<typename T> std::vector<T> v{1,2,3};",
    "$ echo $HOME; export PATH=\"$PATH:/usr/local/bin\"",
    "__init__ __name__ _private __dunder__ snake_case camelCase PascalCase SCREAMING_CASE",
    "0x7fffffff 0b1010 0o777 1e-10 3.14159f 1_000_000 .5 5.",
    "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,3 +1,4 @@\n-old\n+new\n",
]

NUMBERS = [
    "0", "1", "12", "123", "1234", "12345", "123456", "1234567", "12345678901234567890",
    "3.14159265358979", "-42", "+7", "1,234,567.89", "1.234.567,89", "10^6", "2^31-1",
    "2024-01-15", "15/01/2024", "01/15/24", "2024-01-15T13:45:30Z", "13:45", "1:05:09 PM",
    "Tuesday, March 3rd, 2020", "Q1 2023", "FY24", "v1.2.3-rc.1", "192.168.0.1",
    "+1 (555) 123-4567", "$1,000,000", "€50", "£3.50", "¥100", "100%", "42nd", "3rd", "1st",
    "½ ¼ ¾", "Ⅻ ⅷ", "①②③", "٣٤٥", "१२३", "一二三", "1⁄2", "x²+y³", "₀₁₂",
]

WHITESPACE = [
    " ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r", " \n ",
    "a  b", "a   b", "a\tb", "a\nb", "a\r\nb", "a \n b", "  leading", "trailing  ",
    "  both  ", "\n\nleading newlines", "trailing newlines\n\n", "tab\tseparated\tvalues",
    "mixed \t \n \r\n spaces", "many          spaces", "a\u00a0b", "a\u2003b", "a\u3000b",
    "a\u0085b", "a\u2028b\u2029c", "a\u200bb", "\u00a0\u00a0x", " \u00a0 ", "\x0b\x0c",
    "x\n\n\n\n\n\ny", "line1\nline2\nline3", " " * 40, "\n" * 20, "\t" * 10 + "x",
]

CJK = [
    "你好，世界！", "我爱自然语言处理。", "今天天气很好，我们去公园吧。",
    "日本語のテキストです。", "ひらがなとカタカナ", "東京は日本の首都です。",
    "안녕하세요 세계", "한국어 문장입니다.", "中文English混合text", "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ１２３",
    "「引用」『二重』【括弧】", "漢字かな交じり文", "𠀀𠀁𪚥", "鿰鿱鿲", "ㄅㄆㄇㄈ",
    "\U0002EBF0\U0002EBF1 Unicode 15.1 CJK", "\U00011F04\U00011F05\U00011F50 Kawi (15.0)",
]

EMOJI = [
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸🇯🇵", "1️⃣#️⃣", "❤️", "☺︎", "🧑🏿‍🚀",
    "I ❤️ NY 🗽", "emoji😀inside", "👩‍💻 coding", "🤷‍♂️🤷‍♀️", "🫠🫶🪿",
    "😀😃😄😁😆😅😂🤣", "\U0001FAE8\U0001FA77 new in 15.0", "🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",
]

COMBINING = [
    "e\u0301", "cafe\u0301", "n\u0303", "a\u0308\u0304", "Z\u0351\u0364\u0315a\u0306l\u0310g\u0352o\u0301",
    "Tiếng Việt có dấu", "ä vs a\u0308", "\u0301alone", "हिन्दी भाषा", "தமிழ்", "ภาษาไทย",
    "ἀρχῇ", "o\u0328\u0301", "\u20dd\u20e3", "Å Å", "ﬁ ﬂ ﬀ",
]

RTL = [
    "مرحبا بالعالم", "العربية لغة جميلة.", "שלום עולם", "עברית משמאל לימין?",
    "Hello مرحبا World", "abc \u200fשלום\u200e def", "فارسی زبان", "اردو", "ܫܠܡܐ",
    "\u202eRTL override\u202c", "١٢٣ مرحبا 456",
]

SPECIAL_LIKE = [
    "<s>", "</s>", "<unk>", "<s>Hello</s>", "<|im_start|>", "<|im_end|>", "<|endoftext|>",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "<|im_start", "im_start|>",
    "<|im_start|><|im_start|>", "<<|im_end|>>", "<|im_end|>|>", "text<|endoftext|>text",
    "<0x0A>", "<0x41><0x42>", "[INST] hi [/INST]", "<<SYS>>\nsys\n<</SYS>>",
    "<|eot_id|>", "<|start_header_id|>user<|end_header_id|>", "<start_of_turn>model",
    "<end_of_turn>", "<|user|>", "<|assistant|>", "<|end|>", "<repo_name>x<file_sep>y",
    "<jupyter_code>print(1)<jupyter_output>", "<fim_prefix>", "< s >", "<S>", "</s >",
    " <s> ", "<|endoftext|> <|endoftext|>", "a<|im_end|>b<|im_start|>c", "<||>", "<|>",
    "<filename>main.c<gh_stars>100", "<issue_start>bug<issue_comment>ok<issue_closed>",
]

INVALID = [
    b"\x80", b"\xbf", b"\xc0", b"\xc1\x81", b"\xc0\x80", b"\xe0\x80\x80", b"\xed\xa0\x80",
    b"\xed\xbf\xbf", b"\xf0\x80\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xfe", b"\xff",
    b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"abc\xffdef", b"\xe2\x28\xa1", b"\xa0\xa1",
    b"caf\xe9", b"\xc3\x28", b"hello\x80world", b"\xf0\x9f\x98\x80\x80", b"\xed\xa0\x80\xed\xb0\x80",
    b"  \xff  ", b"\xff\xfe\xfd", b"a\xc2", b"\xe2\x96", b"\xe2\x96\x81\xe2\x96",
    b"\x00", b"a\x00b", b"\x00\x00\x00", b"\xef\xbb\xbfBOM", b"\xef\xbf\xbd", b"\xe0\xa0",
    b"\xf4\x8f\xbf\xbf", b"\xc2\x85", b"\xc2\xa0",
]

CONTROL = [
    "\x01\x02\x03", "\x1b[31mred\x1b[0m", "bell\x07", "back\x08space", "\x7f", "\x1c\x1d\x1e\x1f",
    "form\x0cfeed", "vertical\x0btab", "esc\x1b", "\u200d", "\u2060", "\ufeff", "\ue000\uf8ff",
    "\U000f0000", "\u0378", "\U0010ffff",
]


def _long(rng):
    words = " ".join(PROSE).split()
    out = []
    for n in (300, 1000, 3000):
        out.append(" ".join(rng.choice(words) for _ in range(n)))
    out.append("".join(rng.choice(CJK) for _ in range(200)))
    out.append("\n".join(CODE) * 5)
    out.append("a" * 5000)
    out.append(" " * 3000 + "x")
    out.append("9" * 2000)
    return out


CATEGORIES = {
    "prose": PROSE, "code": CODE, "numbers": NUMBERS, "whitespace": WHITESPACE, "cjk": CJK,
    "emoji": EMOJI, "combining": COMBINING, "rtl": RTL, "special": SPECIAL_LIKE,
    "invalid": INVALID, "control": CONTROL,
}


def _b(s):
    return s if isinstance(s, bytes) else s.encode("utf-8", "surrogatepass")


def corpus(n_random=1800, seed=20240604):
    """The corpus: every sample, the long strings, then n_random mixes."""
    rng = random.Random(seed)
    out = [b""]
    for name in CATEGORIES:
        out += [_b(s) for s in CATEGORIES[name]]
    out += [_b(s) for s in _long(rng)]
    names = list(CATEGORIES)
    seps = [b"", b" ", b"\n", b"  ", b"\t", b", ", b"\r\n"]
    for _ in range(n_random):
        parts = []
        for _ in range(rng.randint(1, 5)):
            cat = rng.choice(names)
            s = _b(rng.choice(CATEGORIES[cat]))
            if rng.random() < 0.3 and len(s) > 2:  # a random slice: may cut UTF-8 apart
                a = rng.randrange(len(s))
                s = s[a:a + rng.randint(1, len(s))]
            parts.append(s)
            parts.append(rng.choice(seps))
        out.append(b"".join(parts[:-1]))
    return out


def is_valid_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


if __name__ == "__main__":
    c = corpus()
    if "--stats" in sys.argv:
        for name, lst in CATEGORIES.items():
            print(f"{name}: {len(lst)}")
        print(f"total: {len(c)}, valid UTF-8: {sum(map(is_valid_utf8, c))}, bytes: {sum(map(len, c))}")
    else:
        for s in c:
            print(s.hex())
