#include "src/io/s3/s3_xml.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardq {
namespace {

using ::testing::HasSubstr;

constexpr char kPage[] =
    R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bkt</Name>
<Prefix>d/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys><IsTruncated>true</IsTruncated>
<Contents><Key>d/a&amp;b.txt</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified>
<ETag>&quot;0123abcd&quot;</ETag><Size>12</Size><StorageClass>STANDARD</StorageClass></Contents>
<Contents><Key>d/caf&#233;</Key><ETag>"ff-2"</ETag><Size>0</Size></Contents>
<NextContinuationToken>tok/1==</NextContinuationToken></ListBucketResult>)";

TEST(S3Xml, ParsesAListPage) {
  absl::StatusOr<S3ListPage> page = ParseListPage(kPage, "s3://bkt/d/");
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->objects.size(), 2u);
  EXPECT_EQ(page->objects[0].key, "d/a&b.txt");
  EXPECT_EQ(page->objects[0].size, 12);
  EXPECT_EQ(page->objects[0].etag, "0123abcd");
  EXPECT_EQ(page->objects[1].key, "d/caf\xc3\xa9");
  EXPECT_EQ(page->objects[1].etag, "ff-2");
  EXPECT_EQ(page->next_continuation_token, "tok/1==");
}

TEST(S3Xml, LastPageHasNoToken) {
  absl::StatusOr<S3ListPage> page = ParseListPage(
      "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>", "u");
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(page->objects.empty());
  EXPECT_EQ(page->next_continuation_token, "");
}

TEST(S3Xml, RefusesWhatIsNotAListing) {
  EXPECT_THAT(ParseListPage("<html>proxy error</html>", "s3://b/p").status().message(),
              HasSubstr("listing s3://b/p: the answer is not a ListBucketResult"));
  EXPECT_EQ(ParseListPage("<ListBucketResult><Contents><Key>k</Key></Contents>"
                          "</ListBucketResult>", "u").status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_THAT(ParseListPage("<ListBucketResult><IsTruncated>true</IsTruncated>"
                            "</ListBucketResult>", "u").status().message(),
              HasSubstr("without a NextContinuationToken"));
}

TEST(S3Xml, SummarisesErrors) {
  EXPECT_EQ(ParseErrorSummary("<Error><Code>AccessDenied</Code><Message>Access "
                              "Denied.</Message></Error>"),
            "AccessDenied: Access Denied.");
  EXPECT_EQ(ParseErrorSummary("<Error><Code>NoSuchKey</Code></Error>"), "NoSuchKey");
  EXPECT_EQ(ParseErrorSummary("not xml"), "");
}

TEST(S3Xml, UnescapesEntitiesAndLeavesUnknownOnes) {
  EXPECT_EQ(XmlUnescape("a&lt;b&gt;&quot;&apos;&amp;&#x41;&#66;"), "a<b>\"'&AB");
  EXPECT_EQ(XmlUnescape("x&bogus;y&"), "x&bogus;y&");
}

TEST(S3Xml, TrimsETagQuotes) {
  EXPECT_EQ(TrimETag("\"abc\""), "abc");
  EXPECT_EQ(TrimETag(" W/\"abc-3\" "), "abc-3");
  EXPECT_EQ(TrimETag("abc"), "abc");
}

}  // namespace
}  // namespace shardq
