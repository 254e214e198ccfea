#include "bench/coordinator_throughput/session_driver.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/shardq/coordinator.grpc.pb.h"
#include "src/rpc/protocol_version.h"

namespace shardq::throughput {
namespace {

namespace v1 = ::shardq::v1;

// A take that finds every remaining item held by other clients waits this
// long on the server before it is answered with nothing (then asked again).
constexpr int64_t kTakeWaitMs = 10'000;

absl::Status FromGrpc(const grpc::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", s.error_message()));
}

absl::Status FromOp(const v1::OpStatus& op, absl::string_view what) {
  if (op.code() == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(op.code()),
                      absl::StrCat(what, ": ", op.message()));
}

// One client: one stream at a time, opened by Open(queue) and closed (half-
// close, then the server's OK) by the next Open or the destructor.
class StreamSession final : public ClientSession {
 public:
  StreamSession(const std::string& address, std::string worker) : worker_(std::move(worker)) {
    grpc::ChannelArguments args;
    // Its own subchannel pool: a TCP connection of its own, like a Redis
    // client's, rather than the process-wide shared one.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    stub_ = v1::Coordinator::NewStub(
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  }

  ~StreamSession() override { Close().IgnoreError(); }

  absl::Status Open(const std::string& queue) override {
    if (absl::Status s = Close(); !s.ok()) return s;
    ctx_ = std::make_unique<grpc::ClientContext>();
    stream_ = stub_->Session(ctx_.get());
    queue_ = queue;
    request_.Clear();
    v1::SessionOpen* open = request_.mutable_open();
    open->set_queue(queue);
    open->set_worker(worker_);
    open->mutable_version()->set_major(kProtocolMajor);
    open->mutable_version()->set_minor(kProtocolMinor);
    if (!stream_->Write(request_)) return EndedEarly("writing `open`");
    if (!stream_->Read(&response_)) return EndedEarly("waiting for `opened`");
    if (!response_.has_opened()) {
      return absl::InternalError(absl::StrCat("session of '", worker_, "' on queue '", queue,
                                              "': the first answer carries no `opened`"));
    }
    return absl::OkStatus();
  }

  absl::Status Take(const std::string& queue, std::vector<Taken>* out) override {
    out->clear();
    if (stream_ == nullptr || queue != queue_) {
      return absl::FailedPreconditionError(
          absl::StrCat("session of '", worker_, "': Take on queue '", queue,
                       "' without a stream opened on it"));
    }
    while (true) {
      request_.Clear();
      request_.set_request_id(++last_request_id_);
      const std::optional<Taken> completing = std::exchange(completing_, std::nullopt);
      if (completing.has_value()) request_.add_complete_lease_ids(completing->lease_id);
      for (uint64_t lease_id : splits_to_refuse_) {
        v1::SplitAnswer* answer = request_.add_split_answers();
        answer->set_lease_id(lease_id);
        answer->set_split_point(-1);
      }
      splits_to_refuse_.clear();
      request_.set_take(1);
      request_.set_take_wait_ms(kTakeWaitMs);
      if (!stream_->Write(request_)) return EndedEarly("writing a request");
      if (absl::Status s = ReadAnswer(request_.request_id()); !s.ok()) return s;
      if (completing.has_value()) {
        if (absl::Status s = CheckCompleted(*completing); !s.ok()) return s;
      }
      if (absl::Status s = FromOp(response_.take_status(), "take"); !s.ok()) return s;
      if (response_.end_of_input()) return absl::OkStatus();  // drained
      if (response_.items_size() == 0) continue;              // nothing yet: ask again
      for (const v1::WorkItem& item : response_.items()) {
        Taken taken;
        taken.index = item.index();
        taken.lease_id = item.lease_id();
        out->push_back(std::move(taken));
      }
      return absl::OkStatus();
    }
  }

  absl::Status Complete(const std::string& queue, const Taken& taken) override {
    if (completing_.has_value()) {
      return absl::FailedPreconditionError(
          absl::StrCat("session of '", worker_, "': a second completion before the next take"));
    }
    completing_ = taken;
    return absl::OkStatus();
  }

  bool CompletesWithNextTake() const override { return true; }

 private:
  // Reads until the answer to `request_id`; pushed messages (request_id 0)
  // before it are taken note of.
  absl::Status ReadAnswer(uint64_t request_id) {
    while (true) {
      if (!stream_->Read(&response_)) return EndedEarly("waiting for an answer");
      if (response_.request_id() == request_id) break;
      if (response_.request_id() != 0) {
        return absl::InternalError(absl::StrCat("session of '", worker_, "': answer to request ",
                                                response_.request_id(), " while waiting for ",
                                                request_id));
      }
      if (response_.lost_lease_ids_size() > 0) {
        return absl::InternalError(absl::StrCat("session of '", worker_, "' lost lease ",
                                                response_.lost_lease_ids(0)));
      }
      for (const v1::SplitProposal& split : response_.splits()) {
        splits_to_refuse_.push_back(split.lease_id());
      }
    }
    if (response_.lost_lease_ids_size() > 0) {
      return absl::InternalError(
          absl::StrCat("session of '", worker_, "' lost lease ", response_.lost_lease_ids(0)));
    }
    for (const v1::SplitProposal& split : response_.splits()) {
      splits_to_refuse_.push_back(split.lease_id());
    }
    return absl::OkStatus();
  }

  absl::Status CheckCompleted(const Taken& taken) const {
    if (response_.complete_results_size() != 1 ||
        response_.complete_results(0).lease_id() != taken.lease_id) {
      return absl::InternalError(
          absl::StrCat("session of '", worker_, "': the answer carries ",
                       response_.complete_results_size(), " completion results for lease ",
                       taken.lease_id, " of ", ItemName(taken.index)));
    }
    const v1::CompleteResult& result = response_.complete_results(0);
    if (absl::Status s = FromOp(result.status(), absl::StrCat("completion of ",
                                                              ItemName(taken.index)));
        !s.ok()) {
      return s;
    }
    if (result.duplicate()) {
      return absl::InternalError(absl::StrCat("shardq counted the completion of ",
                                              ItemName(taken.index), " as a duplicate"));
    }
    return absl::OkStatus();
  }

  // The stream ended while `doing`: its status, or an error if it was OK.
  absl::Status EndedEarly(absl::string_view doing) {
    const grpc::Status s = stream_->Finish();
    stream_.reset();
    const std::string what =
        absl::StrCat("session of '", worker_, "' on queue '", queue_, "' ended ", doing);
    if (!s.ok()) return FromGrpc(s, what);
    return absl::InternalError(absl::StrCat(what, " (status OK)"));
  }

  // Half-closes the stream and waits for the server to end it; an error
  // unless it ends OK with no completion left unsent.
  absl::Status Close() {
    if (stream_ == nullptr) return absl::OkStatus();
    absl::Status status;
    if (completing_.has_value()) {
      status = absl::FailedPreconditionError(
          absl::StrCat("session of '", worker_, "' closed with the completion of ",
                       ItemName(completing_->index), " unsent"));
      completing_.reset();
    }
    stream_->WritesDone();
    while (stream_->Read(&response_)) {
    }
    const grpc::Status s = stream_->Finish();
    stream_.reset();
    if (status.ok()) status = FromGrpc(s, absl::StrCat("closing the session of '", worker_, "'"));
    return status;
  }

  const std::string worker_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionResponse>> stream_;
  std::string queue_;
  uint64_t last_request_id_ = 0;
  std::optional<Taken> completing_;        // sent with the next take
  std::vector<uint64_t> splits_to_refuse_;  // proposals, answered with the next take
  v1::SessionRequest request_;              // reused: no allocation per item
  v1::SessionResponse response_;
};

class SessionSystem final : public System {
 public:
  SessionSystem(std::string address, std::unique_ptr<System> control)
      : address_(std::move(address)), control_(std::move(control)) {}

  absl::Status CreateQueue(const std::string& queue, int64_t num_items) override {
    return control_->CreateQueue(queue, num_items);
  }

  absl::StatusOr<std::unique_ptr<ClientSession>> Connect(const std::string& worker) override {
    return std::unique_ptr<ClientSession>(std::make_unique<StreamSession>(address_, worker));
  }

  absl::StatusOr<std::string> CheckDrained(const std::string& queue, int64_t num_items) override {
    return control_->CheckDrained(queue, num_items);
  }

 private:
  const std::string address_;
  const std::unique_ptr<System> control_;
};

}  // namespace

std::unique_ptr<System> NewSessionSystem(std::string address, std::unique_ptr<System> control) {
  return std::make_unique<SessionSystem>(std::move(address), std::move(control));
}

}  // namespace shardq::throughput
