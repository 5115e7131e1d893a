/*
 * Socket helpers for the HTTP server (src/http/linger.ts, src/http/multi-accept.ts), Linux only.
 *
 * discardReceived(fd): drops what a TCP socket has received, without copying it (recv with
 * MSG_TRUNC: Linux discards a stream socket's bytes in the kernel). The HTTP server uses it for
 * the body of a request it has refused: the client must be able to finish sending (or the reset
 * that answers its next bytes would make its kernel drop the refusal it has not read yet), but
 * reading those bytes through Node's HTTP parser costs the event loop a callback per 64 KiB.
 *
 * Returns the bytes dropped (0: none waiting), -1 once the client has finished sending (FIN), or
 * -2 on an error (a reset, a closed descriptor). Never blocks.
 *
 * duplicateDescriptor(fd): a new descriptor (close-on-exec) for the same open socket, or -errno.
 * The server listens on its socket through several handles: Node's libuv accepts one connection
 * per handle and loop iteration, so a busy loop let connections wait in the listen queue.
 *
 * Elsewhere than Linux neither is exported (addon.c), and the server does without them.
 */
#define _POSIX_C_SOURCE 200809L /* F_DUPFD_CLOEXEC under -std=c11 */
#define NAPI_VERSION 8
#include <node_api.h>

#ifdef __linux__
#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/types.h>

/* The one argument, a descriptor: false (a TypeError thrown) unless it is one. */
static int fd_argument(napi_env env, napi_callback_info info, const char *usage, int32_t *fd) {
  size_t argc = 1;
  napi_value argv[1];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_value_int32(env, argv[0], fd) != napi_ok || *fd < 0) {
    napi_throw_type_error(env, NULL, usage);
    return 0;
  }
  return 1;
}

napi_value qd_js_discard_received(napi_env env, napi_callback_info info) {
  napi_value out;
  int32_t fd;
  if (!fd_argument(env, info, "quantd addon: discardReceived(fd)", &fd)) return NULL;
  double dropped = 0, result;
  for (;;) {
    /* MSG_TRUNC on a TCP socket: the kernel consumes up to len bytes and copies none of them */
    const ssize_t n = recv(fd, NULL, (size_t)1 << 30, MSG_TRUNC | MSG_DONTWAIT);
    if (n > 0) {
      dropped += (double)n;
      continue;
    }
    if (n == 0) {
      result = -1;
    } else if (errno == EINTR) {
      continue;
    } else {
      result = errno == EAGAIN || errno == EWOULDBLOCK ? dropped : -2;
    }
    break;
  }
  napi_create_double(env, result, &out);
  return out;
}

napi_value qd_js_duplicate_descriptor(napi_env env, napi_callback_info info) {
  napi_value out;
  int32_t fd;
  if (!fd_argument(env, info, "quantd addon: duplicateDescriptor(fd)", &fd)) return NULL;
  const int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  napi_create_int32(env, copy >= 0 ? copy : -errno, &out);
  return out;
}
#endif
