// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! How an adapter's own descriptions reach the engines. The engines take neutral types only
//! (InitRequest, UpdateRequest) and know no serialisation format; an adapter (vLLM's JSON:
//! <weightsync/vllm.hpp>) opts its types in by providing, in namespace weightsync (or its type's
//! namespace), either of
//!
//!   InitRequest   to_init_request(const Info&, InitContext);
//!   UpdateRequest to_update_request(const Info&, const UpdateContext&);
//!
//! found by argument-dependent lookup when an engine member is called with an `Info`
//! (`engine.init_transfer_engine(nccl_init_info)`, `engine.update_weights(update_info, load)`):
//! those members are constrained templates that convert and call their neutral overload. For what
//! a trainer hands its workers, an adapter may also provide the reverse,
//! `Info to_update_info(const UpdateRequest&)` (TrainerEngine::update_info).
//!
//! Why this shape (and not a vLLM-facing engine class over a neutral one): the engines keep their
//! names and every call users write today, while engine/ includes nothing of an adapter; an
//! adapter adds conversions, never a second engine to keep in step. The context argument is a
//! weightsync type so that ADL also searches namespace weightsync: that is what lets vllm/
//! convert a type of another namespace (nlohmann::json). It also carries what a conversion may
//! need of the engine (UpdateContext::init: the plan an M2N init announced).
//! (stdexec's customisation points and nlohmann's to_json/from_json work the same way.)

#include <concepts>

#include "weightsync/engine/init_request.hpp"
#include "weightsync/engine/update_request.hpp"

namespace weightsync {

namespace detail {
//! T, as a type that depends on A... (so that a call with it in a template is looked up by ADL
//! where the template is used, when the adapter's headers are included).
template <class T, class... A>
struct dependent_type {
  using type = T;
};
}  // namespace detail

//! The context of an init conversion (none yet; present so that ADL searches weightsync).
struct InitContext {};

//! What an update conversion may refer to: the engine's init (null before one, and on a sender,
//! which has no plan to refer to).
struct UpdateContext {
  const InitRequest* init = nullptr;
};

//! The neutral types convert to themselves, so that every member that takes an adapter's type
//! takes them too (the engines' non-template overloads are chosen first for them anyway).
inline InitRequest to_init_request(const InitRequest& r, InitContext) {
  return r;
}
inline UpdateRequest to_update_request(const UpdateRequest& r, const UpdateContext&) {
  return r;
}

//! A type an engine's init accepts: it converts to an InitRequest.
template <class I>
concept InitInfo = requires(const I& info, InitContext c) {
  //! the adapter's conversion, found by ADL
  { to_init_request(info, c) } -> std::same_as<InitRequest>;
};

//! A type an engine's update accepts: it converts to an UpdateRequest in the engine's context.
template <class U>
concept UpdateInfo = requires(const U& info, const UpdateContext& c) {
  //! the adapter's conversion, found by ADL
  { to_update_request(info, c) } -> std::same_as<UpdateRequest>;
};

}  // namespace weightsync
