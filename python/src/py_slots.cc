#include "python/src/py_slots.h"

#include <algorithm>
#include <utility>

namespace py = pybind11;

namespace shardq::python {
namespace {

// Byte 0 of a slot's header, which the other process writes too.
uint8_t InUse(const uint8_t* base) { return __atomic_load_n(base, __ATOMIC_ACQUIRE); }
void SetInUse(uint8_t* base, uint8_t v) { __atomic_store_n(base, v, __ATOMIC_RELEASE); }

}  // namespace

void SlotPool::Add(int64_t id, uintptr_t base, int64_t capacity) {
  absl::MutexLock lock(&mu_);
  slots_.push_back(Slot{id, reinterpret_cast<uint8_t*>(base), capacity});
}

int64_t SlotPool::Claim(int64_t bytes, char** data) {
  absl::MutexLock lock(&mu_);
  for (const Slot& s : slots_) {
    if (s.capacity >= bytes && InUse(s.base) == 0) {
      SetInUse(s.base, 1);
      *data = reinterpret_cast<char*>(s.base + kHeader);
      return s.id;
    }
  }
  return -1;
}

bool SlotPool::Remove(int64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = std::find_if(slots_.begin(), slots_.end(), [id](const Slot& s) { return s.id == id; });
  if (it == slots_.end() || InUse(it->base) != 0) return false;
  slots_.erase(it);
  return true;
}

void SlotPool::Release(int64_t id) {
  absl::MutexLock lock(&mu_);
  for (const Slot& s : slots_) {
    if (s.id == id) SetInUse(s.base, 0);
  }
}

std::shared_ptr<SlotClaim> SlotClaim::Make(std::shared_ptr<SlotPool> pool, int64_t bytes) {
  char* data = nullptr;
  const int64_t id = pool->Claim(bytes, &data);
  if (id < 0) return nullptr;
  return std::shared_ptr<SlotClaim>(new SlotClaim(std::move(pool), id, data));
}

SlotClaim::~SlotClaim() {
  if (!handed_.load(std::memory_order_acquire)) pool_->Release(id_);
}

void BindSlots(py::module_& m) {
  py::class_<SlotPool, std::shared_ptr<SlotPool>>(m, "_SlotPool")
      .def(py::init<>())
      .def("add", &SlotPool::Add, py::arg("id"), py::arg("base"), py::arg("capacity"))
      .def("claim", [](SlotPool& p, int64_t bytes) {
             char* data = nullptr;
             return p.Claim(bytes, &data);
           }, py::arg("bytes"))
      .def("remove", &SlotPool::Remove, py::arg("id"))
      .def("release", &SlotPool::Release, py::arg("id"));
}

}  // namespace shardq::python
