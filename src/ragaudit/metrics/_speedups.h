/* What the optional C speedups' source files share: the functions one defines for the module's
 * method table in _speedups.c. */
#ifndef RAGAUDIT_SPEEDUPS_H
#define RAGAUDIT_SPEEDUPS_H
#include <Python.h>

/* _runfile.c */
PyObject *trec_columns(PyObject *self, PyObject *args);

/* _kernel.c */
PyObject *rank_columns(PyObject *self, PyObject *args);

#endif
