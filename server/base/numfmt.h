/* numfmt: numbers written in the shortest form that reads back equal.
 *
 * Jansson writes every real with 17 significant digits, so a config's 0.1
 * came back as 0.10000000000000001, and the loss the event stream wrote
 * as a float (1.2379328) came back from the metric history as the double
 * 1.2379328012466431.  Here a double is written with the first of %.15g,
 * %.16g, %.17g that strtod reads back to the same double, a float with the
 * first of %.6g .. %.9g that reads back to the same float, and a JSON
 * document with each of its reals so.  Depends on Jansson. */
#ifndef NUMFMT_H
#define NUMFMT_H

#include <stddef.h>

#include <jansson.h>

/* The shortest %.Ng (N = 15..17) of v that strtod reads back equal; NaN
 * and infinities as printf writes them.  Returns buf. */
char *numfmt_double(char *buf, size_t cap, double v);

/* The same for a float (N = 6..9, read back through strtof). */
char *numfmt_float(char *buf, size_t cap, float v);

/* The double nearest to numfmt_float(v)'s decimal: a float quantity kept
 * as a double (a metric in SQLite) that numfmt_dumps then writes with the
 * float's digits, as the event stream does. */
double numfmt_float_as_double(float v);

/* json_dumps(j, flags) with every real written by numfmt_double (an
 * integral real keeps its ".0", so it stays a real).  malloc'ed text, NULL
 * when Jansson could not encode j. */
char *numfmt_dumps(const json_t *j, size_t flags);

#endif
