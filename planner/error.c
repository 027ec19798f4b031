/*
 * Error reporting for library code: a message buffer the caller owns. Library
 * functions fill it and return -1; only tools/ print it and choose an exit code.
 */
#include "planner.h"

#include <stdarg.h>

int pt_err_set(pt_err *err, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}
