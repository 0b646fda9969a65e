import unittest

from versions import Version, bump


class BumpTest(unittest.TestCase):
    def test_bump_each_part(self):
        start = Version(1, 2, 3)
        for part, expected in [
            ("major", Version(2, 0, 0)),
            ("minor", Version(1, 3, 0)),
            ("patch", Version(1, 2, 4)),
        ]:
            with self.subTest(part=part):
                self.assertEqual(bump(start, part), expected)


if __name__ == "__main__":
    unittest.main()
