import unittest

from versions import Version, bump, parse


class MoreBumpTest(unittest.TestCase):
    def test_bump_minor_from_zero(self):
        start = parse("0.9.7")
        self.assertEqual(bump(start, "minor"), Version(0, 10, 0))

    def test_parse(self):
        self.assertEqual(parse("2.5"), Version(2, 5, 0))
