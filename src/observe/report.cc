#include "src/observe/report.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "src/observe/status_server.h"

namespace shardq {
namespace {

std::string UrlEncode(absl::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

absl::StatusOr<nlohmann::json> GetJson(httplib::Client& client, const ReportSource& source,
                                       const std::string& path) {
  httplib::Headers headers;
  if (!source.token.empty()) headers.emplace("Authorization", "Bearer " + source.token);
  httplib::Result r = client.Get(path, headers);
  if (!r && r.error() == httplib::Error::Connection) {
    return absl::UnavailableError(absl::StrCat(
        "nothing answers at ", source.address, " (", httplib::to_string(r.error()),
        "); --address is the coordinator's --http address or its gRPC one"));
  }
  if (!r) {
    return absl::UnavailableError(absl::StrCat(
        "no HTTP answer from ", source.address, path, " (", httplib::to_string(r.error()),
        "); --address is the coordinator's --http address or its gRPC one"));
  }
  if (r->status == 401) {
    return absl::PermissionDeniedError(
        absl::StrCat(source.address, " requires the coordinator's token (--token-file)"));
  }
  nlohmann::json body = nlohmann::json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  if (r->status == 404 && body.is_object() && body.contains("error")) {
    return absl::NotFoundError(absl::StrCat(source.address, ": ",
                                            body["error"].get<std::string>()));
  }
  if (r->status != 200 || body.is_discarded()) {
    return absl::UnavailableError(absl::StrCat(source.address, path, " answered HTTP ",
                                               r->status, " without the expected JSON"));
  }
  return body;
}

}  // namespace

absl::StatusOr<std::string> ReportHtml(nlohmann::json server, const nlohmann::json& status,
                                       nlohmann::json timeline, const std::string& queue) {
  nlohmann::json only = {{"queues", nlohmann::json::array()}};
  for (const nlohmann::json& q : status.value("queues", nlohmann::json::array())) {
    if (q.value("name", "") != queue) continue;
    nlohmann::json copy = q;
    // A 64-bit seed would be rounded as a JavaScript number.
    if (copy.contains("seed") && copy["seed"].is_number_unsigned()) {
      copy["seed"] = std::to_string(copy["seed"].get<uint64_t>());
    }
    only["queues"].push_back(std::move(copy));
  }
  if (only["queues"].empty()) {
    return absl::InvalidArgumentError(absl::StrCat("the status has no queue named '", queue, "'"));
  }
  server["report"] = true;
  const nlohmann::json data = {
      {"server", std::move(server)}, {"status", std::move(only)},
      {"timeline", {{queue, std::move(timeline)}}}};
  return LivePage("<p>This report draws itself with the script inside the file.</p>",
                  data.dump());
}

absl::StatusOr<std::string> FetchReport(const ReportSource& source) {
  httplib::Client client("http://" + source.address);
  const int64_t us = absl::ToInt64Microseconds(source.timeout);
  client.set_connection_timeout(us / 1'000'000, us % 1'000'000);
  client.set_read_timeout(us / 1'000'000, us % 1'000'000);
  absl::StatusOr<nlohmann::json> server = GetJson(client, source, "/api/server");
  if (!server.ok() && source.page_of_grpc_address &&
      absl::StartsWith(server.status().message(), "no HTTP answer")) {
    // A gRPC port: its coordinator names its page.
    absl::StatusOr<std::string> page = source.page_of_grpc_address();
    if (!page.ok()) return page.status();
    ReportSource at_page = source;
    at_page.address = *page;
    at_page.page_of_grpc_address = nullptr;
    return FetchReport(at_page);
  }
  if (!server.ok()) return server.status();
  absl::StatusOr<nlohmann::json> status = GetJson(client, source, "/api/status");
  if (!status.ok()) return status.status();
  absl::StatusOr<nlohmann::json> timeline = GetJson(
      client, source, absl::StrCat("/api/timeline?queue=", UrlEncode(source.queue),
                                   "&since=0&limit=200000"));
  if (!timeline.ok()) return timeline.status();
  // The report is of the moment the timeline was read.
  if (timeline->contains("now")) (*server)["now"] = (*timeline)["now"];
  return ReportHtml(*std::move(server), *status, *std::move(timeline), source.queue);
}

}  // namespace shardq
