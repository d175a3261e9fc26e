// Terminal-safe text (posenc/printable.hpp): what a file's names and strings become
// before posenc prints them.

#include <gtest/gtest.h>

#include <string>

#include "posenc/printable.hpp"

namespace posenc {
namespace {

TEST(Printable, PlainTextIsUnchanged) {
  EXPECT_EQ(printable("rope_theta = 10000"), "rope_theta = 10000");
  EXPECT_EQ(printable("C:\\data\\x.npy"), "C:\\data\\x.npy");  // backslashes kept
  EXPECT_EQ(printable("θ·π, 位置, \xf0\x9f\x98\x80"), "θ·π, 位置, \xf0\x9f\x98\x80");
  EXPECT_EQ(printable(""), "");
}

TEST(Printable, ControlsAreEscaped) {
  EXPECT_EQ(printable("\x1b[31mred\x1b[0m"), "\\x1b[31mred\\x1b[0m");
  EXPECT_EQ(printable("a\nb\tc\rd\x07\x7f"), "a\\x0ab\\x09c\\x0dd\\x07\\x7f");
  EXPECT_EQ(printable(std::string("a\0b", 3)), "a\\x00b");
  // C1 controls (CSI U+009B) and bidirectional overrides, though valid UTF-8.
  EXPECT_EQ(printable("\xc2\x9b\x32J"), "\\u009b2J");
  EXPECT_EQ(printable("abc\xe2\x80\xae\x66\x65\x64"), "abc\\u202efed");
  EXPECT_EQ(printable("\xe2\x81\xa6x\xe2\x81\xa9"), "\\u2066x\\u2069");
}

TEST(Printable, BytesThatAreNotUtf8AreEscaped) {
  EXPECT_EQ(printable("\x9b\x32J"), "\\x9b2J");  // a raw 8-bit CSI
  EXPECT_EQ(printable("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");                    // overlong '/'
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a surrogate
  EXPECT_EQ(printable("\xe2\x82"), "\\xe2\\x82");                    // cut short
  EXPECT_EQ(printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // beyond U+10FFFF
}

}  // namespace
}  // namespace posenc
