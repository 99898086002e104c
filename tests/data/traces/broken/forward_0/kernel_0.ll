; ptc kernel 0 extern_mm_0  <- %0
define void @extern_mm_0(i64 %begin, i64 %end, ptr noalias %args) {
entry:
  br label %loop
loop:
  %i = phi i64 [ %begin, %entry ], [ %i.next, %loop ]
  ; buf0 = mm(...)
  %v0 = call float @llvm.ptc.elem(ptr %args, i64 %i, i32 0)
  %i.next = add nuw i64 %i, 1
  %done = icmp eq i64 %i.next, %end
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
