#include "bench/common/session_stream.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "src/rpc/protocol_version.h"

namespace shardq::bench {
namespace {

int64_t NanosSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              t)
      .count();
}

}  // namespace

SessionStream::SessionStream(SessionStreamListener& listener, int worker, bool reopen,
                             v1::SessionRequest open)
    : listener_(listener), worker_(worker), name_(open.open().worker()), reopen_(reopen) {
  outgoing_.push_back(Outgoing{std::move(open), nullptr});
}

void SessionStream::Start(v1::Coordinator::Stub& stub) {
  stub.async()->Session(&ctx_, this);
  // Writes may be started from outside a reaction (another thread, a
  // timer) until the stream no longer takes them; the hold keeps OnDone
  // back until then.
  AddHold();
  StartRead(&response_);
  Pump();
  StartCall();
}

bool SessionStream::Send(v1::SessionRequest request, SessionAnswerFn on_answer,
                         SessionWrittenFn written) {
  {
    absl::MutexLock lock(&mu_);
    if (!accepting_) return false;
    if (on_answer != nullptr) {
      request.set_request_id(++last_request_id_);
      pending_.push_back(
          Pending{request.request_id(), std::move(on_answer), SteadyClock::now()});
    }
    outgoing_.push_back(Outgoing{std::move(request), std::move(written)});
  }
  Pump();
  return true;
}

void SessionStream::HalfClose() {
  {
    absl::MutexLock lock(&mu_);
    if (!accepting_) return;
    accepting_ = false;
    half_close_ = true;
  }
  Pump();
}

void SessionStream::Cancel() {
  {
    absl::MutexLock lock(&mu_);
    if (done_) return;
    cancelled_ = true;
  }
  ctx_.TryCancel();
}

void SessionStream::Abort() {
  {
    absl::MutexLock lock(&mu_);
    read_ended_ = true;
    accepting_ = false;
  }
  ctx_.TryCancel();
  Pump();
}

bool SessionStream::done() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

void SessionStream::Pump() {
  const v1::SessionRequest* write = nullptr;
  bool writes_done = false, release = false;
  {
    absl::MutexLock lock(&mu_);
    if (writing_) return;
    if (!outgoing_.empty() && !read_ended_) {
      writing_ = true;
      current_ = std::move(outgoing_.front());
      outgoing_.pop_front();
      write = &current_.request;
    } else if (half_close_ && !half_closed_ && !read_ended_) {
      writing_ = half_closed_ = writes_done = true;
    } else if (held_ && (read_ended_ || half_closed_)) {
      held_ = false;
      release = true;
    }
  }
  if (write != nullptr) StartWrite(write);
  if (writes_done) StartWritesDone();
  if (release) RemoveHold();
}

void SessionStream::WriteFinished(bool ok) {
  SessionWrittenFn written;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    written = std::move(current_.written);
    current_.written = nullptr;
    if (!ok) {
      // The stream is broken: no more writes; OnDone fails the rest.
      read_ended_ = true;
      accepting_ = false;
    }
  }
  if (written != nullptr) written(ok);
  Pump();
}

void SessionStream::OnWriteDone(bool ok) { WriteFinished(ok); }

void SessionStream::OnWritesDoneDone(bool ok) { WriteFinished(ok); }

void SessionStream::OnReadDone(bool ok) {
  if (!ok) {
    {
      absl::MutexLock lock(&mu_);
      read_ended_ = true;
      accepting_ = false;
    }
    Pump();  // releases the hold once no write is in flight
    return;
  }
  bool opened_now = false, out_of_order = false;
  std::optional<Pending> answered;
  {
    absl::MutexLock lock(&mu_);
    if (!opened_) {
      opened_ = opened_now = true;
      // Requests queued behind the open are timed from here.
      for (Pending& p : pending_) p.sent = SteadyClock::now();
    } else if (response_.request_id() != 0) {
      if (!pending_.empty() && pending_.front().request_id == response_.request_id()) {
        answered = std::move(pending_.front());
        pending_.pop_front();
      } else {
        out_of_order = true;
      }
    }
  }
  if ((opened_now && !response_.has_opened()) || out_of_order) {
    Abort();  // not the protocol: OnDone fails what is pending
    return;
  }
  if (opened_now) {
    listener_.StreamOpened(worker_, reopen_, response_.opened());
  } else {
    listener_.Pushed(worker_, response_);
    if (answered.has_value()) answered->on_answer(&response_, NanosSince(answered->sent));
  }
  StartRead(&response_);
}

void SessionStream::OnDone(const grpc::Status& status) {
  std::deque<Pending> pending;
  std::deque<Outgoing> outgoing;
  bool cancelled;
  {
    absl::MutexLock lock(&mu_);
    done_ = true;
    accepting_ = false;
    pending.swap(pending_);
    outgoing.swap(outgoing_);
    cancelled = cancelled_;
  }
  const absl::Status ended =
      status.ok() ? absl::UnavailableError(
                        absl::StrCat("session of ", name_, " ended before answering"))
                  : absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                                 absl::StrCat("session of ", name_, ": ",
                                              status.error_message()));
  for (Outgoing& o : outgoing) {
    if (o.written != nullptr) o.written(false);
  }
  for (Pending& p : pending) p.on_answer(ended, 0);
  listener_.StreamEnded(worker_, cancelled, status);  // last: the owner may now delete this
}

v1::SessionRequest SessionOpenRequest(absl::string_view queue, absl::string_view worker,
                                      absl::Span<const uint64_t> held_lease_ids) {
  v1::SessionRequest request;
  v1::SessionOpen* open = request.mutable_open();
  open->set_queue(std::string(queue));
  open->set_worker(std::string(worker));
  open->mutable_version()->set_major(kProtocolMajor);
  open->mutable_version()->set_minor(kProtocolMinor);
  for (uint64_t id : held_lease_ids) open->add_lease_ids(id);
  return request;
}

absl::Status FromOp(const v1::OpStatus& op, absl::string_view what) {
  if (op.code() == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(op.code()),
                      absl::StrCat(what, ": ", op.message()));
}

absl::StatusOr<bool> CompletionOf(const v1::SessionResponse& answer, uint64_t lease_id,
                                  absl::string_view who) {
  if (answer.complete_results_size() != 1 ||
      answer.complete_results(0).lease_id() != lease_id) {
    return absl::InternalError(absl::StrCat("session of ", who, ": the answer carries ",
                                            answer.complete_results_size(),
                                            " completion results for lease ", lease_id));
  }
  const v1::CompleteResult& result = answer.complete_results(0);
  if (absl::Status s = FromOp(result.status(), absl::StrCat(who, ": complete lease ", lease_id));
      !s.ok()) {
    return s;
  }
  return result.duplicate();
}

std::vector<std::unique_ptr<v1::Coordinator::Stub>> OwnConnectionStubs(const std::string& address,
                                                                       int count) {
  std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs;
  for (int i = 0; i < count; ++i) {
    grpc::ChannelArguments args;
    // A distinct argument and a local subchannel pool: each channel gets a
    // TCP connection of its own rather than sharing one.
    args.SetInt("shardq.bench.channel", i);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    stubs.push_back(v1::Coordinator::NewStub(
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args)));
  }
  return stubs;
}

}  // namespace shardq::bench
