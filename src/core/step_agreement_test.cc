#include "src/core/step_agreement.h"

#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace shardq {
namespace {

StepReport R(const std::string& who, int64_t count, bool done, int64_t participants = 2,
             const std::string& key = "epoch-0") {
  StepReport r;
  r.key = key;
  r.participant = who;
  r.participants = participants;
  r.count = count;
  r.done = done;
  return r;
}

StepTally Ok(StepAgreements& a, const StepReport& r) {
  absl::StatusOr<StepTally> t = a.Report(r);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : StepTally{};
}

TEST(StepAgreements, AgreesOnTheLargestCountOnceEveryoneIsDone) {
  StepAgreements a("q");
  EXPECT_TRUE(Ok(a, R("a", 1, false)).granted);
  EXPECT_TRUE(Ok(a, R("b", 1, false)).granted);
  EXPECT_TRUE(Ok(a, R("b", 2, false)).granted);
  StepTally t = Ok(a, R("a", 1, true));
  EXPECT_FALSE(t.agreed);
  EXPECT_EQ(t.done, 1);
  t = Ok(a, R("b", 3, true));
  EXPECT_TRUE(t.agreed);
  EXPECT_EQ(t.steps, 3);
  // The other learns it on its next report.
  t = Ok(a, R("a", 1, true));
  EXPECT_TRUE(t.agreed);
  EXPECT_EQ(t.steps, 3);
  EXPECT_TRUE(Ok(a, R("a", 3, true)).granted);
}

TEST(StepAgreements, PaddingIsGrantedOnlyUpToAnotherParticipantsCount) {
  StepAgreements a("q");
  Ok(a, R("a", 2, true));
  Ok(a, R("b", 3, false));
  EXPECT_TRUE(Ok(a, R("a", 3, true)).granted);
  StepTally t = Ok(a, R("a", 4, true));
  EXPECT_FALSE(t.granted);  // b has not reached 4: a must not get ahead of it
  EXPECT_EQ(t.max_count, 3);
  Ok(a, R("b", 4, false));
  EXPECT_TRUE(Ok(a, R("a", 4, true)).granted);
  t = Ok(a, R("b", 4, true));
  EXPECT_TRUE(t.agreed);
  EXPECT_EQ(t.steps, 4);
}

TEST(StepAgreements, WaitsForEveryExpectedParticipant) {
  StepAgreements a("q");
  StepTally t = Ok(a, R("a", 0, true, 3));
  EXPECT_FALSE(t.agreed);
  EXPECT_FALSE(Ok(a, R("b", 5, true, 3)).agreed);
  t = Ok(a, R("c", 2, true, 3));
  EXPECT_TRUE(t.agreed);
  EXPECT_EQ(t.steps, 5);
  EXPECT_EQ(t.reported, 3);
}

TEST(StepAgreements, KeysAreIndependent) {
  StepAgreements a("q");
  Ok(a, R("a", 1, true, 1, "epoch-0"));
  StepTally t = Ok(a, R("a", 7, true, 1, "epoch-1"));
  EXPECT_TRUE(t.agreed);
  EXPECT_EQ(t.steps, 7);
  EXPECT_EQ(a.keys(), 2);
}

TEST(StepAgreements, RefusesReportsThatBreakTheProtocol) {
  StepAgreements a("q");
  Ok(a, R("a", 3, false));
  EXPECT_TRUE(absl::IsInvalidArgument(a.Report(R("a", 2, false)).status()));
  Ok(a, R("a", 3, true));
  EXPECT_TRUE(absl::IsInvalidArgument(a.Report(R("a", 3, false)).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(a.Report(R("b", 1, false, 5)).status()));
  Ok(a, R("b", 1, true));
  absl::StatusOr<StepTally> extra = a.Report(R("c", 0, true));
  EXPECT_TRUE(absl::IsFailedPrecondition(extra.status())) << extra.status();
  EXPECT_NE(std::string(extra.status().message()).find("'c'"), std::string::npos);
  // Agreed on 3: nobody may go beyond; a padding request that crossed the
  // agreement is refused, not an error.
  absl::StatusOr<StepTally> late = a.Report(R("b", 4, true));
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_FALSE(late->granted);
  EXPECT_TRUE(late->agreed);
  EXPECT_EQ(late->steps, 3);
  EXPECT_TRUE(absl::IsInvalidArgument(a.Report(R("", 0, true)).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(a.Report(R("x", 0, true, 0, "k2")).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(a.Report(R("x", -1, true, 1, "k3")).status()));
}

TEST(StepAgreements, ForgetsTheOldestKeysBeyondTheLimit) {
  StepAgreements a("q");
  for (size_t i = 0; i < kMaxStepKeys + 5; ++i) {
    Ok(a, R("a", 1, true, 1, "k" + std::to_string(i)));
  }
  EXPECT_EQ(a.keys(), static_cast<int64_t>(kMaxStepKeys));
}

}  // namespace
}  // namespace shardq
