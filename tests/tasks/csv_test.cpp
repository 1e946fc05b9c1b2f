#include "tasks/csv.h"

#include <dirent.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpueval/error.h"
#include "tasks/dataset_bounds.h"
#include "test_util.h"

namespace gpueval {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string error_of(std::string_view text, size_t columns = 0) {
  try {
    parse_csv(text, "x.csv", columns);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no Error thrown";
  return "";
}

TEST(CsvTest, PlainRecordsWithLfOrCrlfAndNoFinalNewline) {
  const auto records = parse_csv("a,b,c\r\nd,e,f\ng,,i", "x.csv");
  ASSERT_EQ(records.size(), 3u);
  EXPECT_THAT(records[0].fields, ElementsAre("a", "b", "c"));
  EXPECT_THAT(records[1].fields, ElementsAre("d", "e", "f"));
  EXPECT_THAT(records[2].fields, ElementsAre("g", "", "i"));
  EXPECT_EQ(records[2].line, 3);
}

TEST(CsvTest, QuotedFieldsKeepCommasQuotesAndLineBreaks) {
  const auto records =
      parse_csv("\"a, b\",\"say \"\"hi\"\"\",\"two\nlines\"\n\"\",x,\"\"\"\"\nlast,\"crlf\r\ninside\",z\n", "x.csv", 3);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_THAT(records[0].fields, ElementsAre("a, b", "say \"hi\"", "two\nlines"));
  EXPECT_THAT(records[1].fields, ElementsAre("", "x", "\""));
  EXPECT_EQ(records[1].line, 3);  // the record after a two-line field starts on line 3
  EXPECT_THAT(records[2].fields, ElementsAre("last", "crlf\r\ninside", "z"));
  EXPECT_EQ(records[2].line, 4);
}

TEST(CsvTest, TrailingCommaIsAnEmptyLastFieldAndBlankLinesAreSkipped) {
  const auto records = parse_csv("a,\n\n\nb,c\n", "x.csv", 2);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_THAT(records[0].fields, ElementsAre("a", ""));
  EXPECT_EQ(records[1].line, 4);
}

TEST(CsvTest, BadRecordsNameTheFileAndLine) {
  EXPECT_EQ(error_of("a,b\nc\n", 2), "x.csv:2: 1 fields, expected 2");
  EXPECT_EQ(error_of("a,b\n\"c\nd,e\n", 2), "x.csv:2: quoted field is never closed");
  EXPECT_THAT(error_of("a,\"b\"x\n"), HasSubstr("x.csv:1: unexpected character after a closing quote"));
  // Kept as text, as Python's csv module reads it (the MMLU release has one).
  EXPECT_THAT(parse_csv("a,b\"c\n", "x.csv")[0].fields, ElementsAre("a", "b\"c"));
  EXPECT_EQ(error_of("\"q\nw\",b\nc,d,e\n", 2), "x.csv:3: 3 fields, expected 2");
}

TEST(CsvTest, ARecordPastTheDocumentBoundIsRefusedNamingItsLine) {
  // Exactly the bound is one document; a byte more, in an unquoted field or in a quoted field
  // that spans lines (or is never closed), is refused before the rest of the file is read.
  const std::string at_bound(kMaxDocumentBytes, 'x');
  EXPECT_EQ(parse_csv("a\n" + at_bound + "\n", "x.csv", 1).at(1).fields.at(0).size(), kMaxDocumentBytes);
  const std::string message =
      "x.csv:2: the record is 67108865 bytes, past the bound of 67108864 (64 MiB) that gpueval "
      "accepts for one document";
  EXPECT_EQ(error_of("a\n" + at_bound + "y\nb\n", 1), message);
  std::string quoted =
      "a\n\"" + std::string(kMaxDocumentBytes / 2, 'x') + "\n" + std::string(kMaxDocumentBytes / 2, 'x');
  EXPECT_EQ(error_of(quoted + "\"\n", 1), message);
  EXPECT_EQ(error_of(quoted, 1), message);  // never closed: the bound is met first
}

TEST(CsvTest, MalformedFileOnDiskNamesPathAndLine) {
  testing::TempDir dir;
  testing::write_text(dir.file("bad.csv"), "q,A,B,C,D,A\n\"q\",A,B,C,D\n");
  try {
    read_csv(dir.file("bad.csv"), 6);
    ADD_FAILURE() << "no Error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), dir.file("bad.csv") + ":2: 5 fields, expected 6");
  }
}

// Every MMLU split parses with six fields per record, and the row counts are the release's.
TEST(CsvTest, MmluReleaseRowCounts) {
  GPUEVAL_REQUIRE_SHARED();
  for (const auto& [split, expected] :
       std::vector<std::pair<std::string, size_t>>{{"dev", 285}, {"val", 1531}, {"test", 14042}}) {
    const std::string dir = testing::shared_dir() + "/data/mmlu/" + split;
    DIR* d = opendir(dir.c_str());
    ASSERT_NE(d, nullptr) << dir;
    size_t rows = 0, files = 0;
    while (const dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() < 4 || name.substr(name.size() - 4) != ".csv") continue;
      ++files;
      for (const CsvRecord& r : read_csv(dir + "/" + name, 6)) {
        ++rows;
        EXPECT_TRUE(r.fields[5] == "A" || r.fields[5] == "B" || r.fields[5] == "C" || r.fields[5] == "D")
            << name << ":" << r.line;
      }
    }
    closedir(d);
    EXPECT_EQ(files, 57u) << split;
    EXPECT_EQ(rows, expected) << split;
  }
}

}  // namespace
}  // namespace gpueval
