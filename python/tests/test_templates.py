"""The launcher's compiled-once prompt templates (gpueval_lm_eval/templates.py): lm-eval's
apply_template gives the same text and the same errors with them, and compiles each template once."""

from __future__ import annotations

import unittest
from unittest import mock

import jinja2
from lm_eval import utils

from gpueval_lm_eval import templates

ORIGINAL = utils.apply_template  # lm-eval's own, before any install()


class TemplatesTest(unittest.TestCase):
    def setUp(self):
        self.addCleanup(setattr, utils, "apply_template", ORIGINAL)
        utils.apply_template = ORIGINAL

    def test_same_text_same_errors_compiled_once(self):
        docs = [{"question": "2+2?", "choices": ["3", "4"], "answer": 1},
                {"question": " Why?\n", "choices": ["a", "b", "c"], "answer": 2}]
        texts = ["{{question.strip()}}\nA. {{choices[0]}}\nAnswer:",
                 "{{choices[answer]}}", "{{ ['A', 'B', 'C'][:choices|length] }}",
                 "{% for c in choices %}{{ loop.index }}: {{ c | upper }} {% endfor %}",
                 "{{ question | regex_replace('[?]', '!') }}"]
        expected = [[ORIGINAL(t, d) for t in texts] for d in docs]
        self.assertTrue(templates.install())
        self.assertTrue(templates.install())  # once
        with mock.patch.object(utils.env, "from_string", wraps=utils.env.from_string) as compile_:
            got = [[utils.apply_template(t, d) for t in texts] for d in docs]
            again = [[utils.apply_template(t, d) for t in texts] for d in docs]
        self.assertEqual(got, expected)
        self.assertEqual(again, expected)
        self.assertLessEqual(compile_.call_count, len(texts))  # at most once each
        for broken, doc in (("{{ question ", docs[0]), ("{{ missing }}", docs[0])):
            with self.assertRaises(jinja2.TemplateError) as theirs:
                ORIGINAL(broken, doc)
            for _ in range(2):
                with self.assertRaises(type(theirs.exception)) as ours:
                    utils.apply_template(broken, doc)
                self.assertEqual(str(ours.exception), str(theirs.exception))


if __name__ == "__main__":
    unittest.main()
