/*
 * bcryptprimitives.dll for Wine 8.0, which has none.
 *
 * The Go runtime (1.22 and later) loads ProcessPrng from bcryptprimitives.dll
 * before anything else runs and aborts without it ("bcryptprimitives.dll not
 * found"), so no Windows build of Diskplane starts under Debian's Wine. This
 * DLL exports that one function over RtlGenRandom (advapi32's
 * SystemFunction036), which Wine has. hack/wine/setup.sh builds it with
 * mingw-w64 and puts it into the Wine prefix; the tests' wrapper tells Wine
 * to prefer it (WINEDLLOVERRIDES=bcryptprimitives=n).
 */
#include <windows.h>
#define SystemFunction036 NTAPI SystemFunction036
#include <ntsecapi.h>
#undef SystemFunction036

/* ProcessPrng fills data with len random bytes; it never fails on Windows,
 * and here only if RtlGenRandom does. RtlGenRandom takes a ULONG length, so
 * larger requests are served in chunks. */
__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    const SIZE_T max_chunk = 1u << 30;
    while (len > 0) {
        ULONG chunk = (ULONG)(len < max_chunk ? len : max_chunk);
        if (!RtlGenRandom(data, chunk))
            return FALSE;
        data += chunk;
        len -= chunk;
    }
    return TRUE;
}
